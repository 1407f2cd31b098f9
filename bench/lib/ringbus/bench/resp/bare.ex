defmodule Ringbus.Bench.Resp.Bare do
  @moduledoc false
  # The floor under any RESP server written on `gen_tcp`: a listener that
  # answers `PING` with `+PONG` and `CONFIG GET` (which redis-benchmark
  # sends first) with an empty array, and nothing else. A process per
  # connection, the socket in `active: 64` mode as Ringbus's connections
  # have it, every command of a read parsed by binary matching and answered
  # with one write per read. It stores nothing and keeps no state beyond
  # the unparsed rest of a read, so what it costs per request is what the
  # VM and the kernel cost: Ringbus's `PING` rows are measured against it.
  #
  # Any other command, or bytes that are not an array of bulk strings, get
  # an error and a close.

  # As many reads per arming as a Ringbus connection asks for while its
  # reads are small (`Ringbus.Socket.reads/2`).
  @active 64

  @doc "Listens on a free port of 127.0.0.1; returns the listener and its port."
  @spec start() :: {pid(), :inet.port_number()}
  def start do
    {:ok, listen} =
      :gen_tcp.listen(0, [
        :binary,
        ip: {127, 0, 0, 1},
        active: false,
        backlog: 1024,
        nodelay: true
      ])

    {:ok, port} = :inet.port(listen)
    acceptor = spawn(fn -> accept(listen) end)
    :ok = :gen_tcp.controlling_process(listen, acceptor)
    {acceptor, port}
  end

  @doc "Stops the listener; its connections end as their clients close."
  @spec stop(pid()) :: :ok
  def stop(acceptor) do
    Process.exit(acceptor, :kill)
    :ok
  end

  defp accept(listen) do
    case :gen_tcp.accept(listen) do
      {:ok, socket} ->
        pid = spawn(fn -> await_socket(socket) end)
        :ok = :gen_tcp.controlling_process(socket, pid)
        send(pid, :go)
        accept(listen)

      {:error, _} ->
        :ok
    end
  end

  defp await_socket(socket) do
    receive do
      :go -> serve(socket, "")
    end
  end

  defp serve(socket, rest) do
    :ok = :inet.setopts(socket, active: @active)
    loop(socket, rest)
  end

  defp loop(socket, rest) do
    receive do
      {:tcp, ^socket, data} ->
        case commands(rest <> data, []) do
          {:ok, replies, rest} ->
            if replies != [], do: :gen_tcp.send(socket, replies)
            loop(socket, rest)

          :error ->
            :gen_tcp.send(socket, "-ERR bare responder: PING and CONFIG GET only\r\n")
            :gen_tcp.close(socket)
        end

      {:tcp_passive, ^socket} ->
        serve(socket, rest)

      {closed, ^socket} when closed in [:tcp_closed, :tcp_error] ->
        :ok
    end
  end

  # The replies to every whole command in `data`, and the bytes left.
  defp commands(data, replies) do
    case command(data) do
      {:ok, args, rest} ->
        case reply(args) do
          nil -> :error
          reply -> commands(rest, [replies | reply])
        end

      :more ->
        {:ok, replies, data}

      :error ->
        :error
    end
  end

  defp reply(["PING"]), do: "+PONG\r\n"
  defp reply(["CONFIG", "GET", _]), do: "*0\r\n"
  defp reply(_), do: nil

  defp command(<<"*", rest::binary>>) do
    case integer(rest) do
      {:ok, count, rest} when count > 0 and count < 16 -> bulks(rest, count, [])
      {:ok, _, _} -> :error
      other -> other
    end
  end

  defp command(<<>>), do: :more
  defp command(_), do: :error

  defp bulks(rest, 0, acc), do: {:ok, Enum.reverse(acc), rest}

  defp bulks(<<"$", rest::binary>>, count, acc) do
    case integer(rest) do
      {:ok, size, rest} when size >= 0 and size < 65_536 ->
        case rest do
          <<arg::binary-size(size), "\r\n", rest::binary>> -> bulks(rest, count - 1, [arg | acc])
          _ when byte_size(rest) < size + 2 -> :more
          _ -> :error
        end

      {:ok, _, _} ->
        :error

      other ->
        other
    end
  end

  defp bulks(<<>>, _count, _acc), do: :more
  defp bulks(_, _count, _acc), do: :error

  # A decimal number ended by CRLF, of at most 5 digits.
  defp integer(data), do: integer(data, 0, 0)

  defp integer(<<d, rest::binary>>, value, digits) when d in ?0..?9 and digits < 5,
    do: integer(rest, value * 10 + d - ?0, digits + 1)

  defp integer(<<"\r\n", rest::binary>>, value, digits) when digits > 0, do: {:ok, value, rest}
  defp integer(<<>>, _value, _digits), do: :more
  defp integer(<<"\r">>, _value, _digits), do: :more
  defp integer(_, _value, _digits), do: :error
end

defmodule Ringbus.Test.RespClient do
  @moduledoc """
  A bare `:gen_tcp` (or `:ssl`) RESP client for protocol tests: it writes
  commands or raw bytes and reads replies back as terms, with a reply reader
  of its own, so the tests do not read replies with the code under test.

  Replies: `{:simple, text}`, `{:error, text}`, integers, binaries, `nil`,
  lists, `{:map, pairs}`, `{:set, items}`, `{:push, items}`, `{:verbatim,
  text}`, `{:double, text}`, `{:bool, boolean}`.
  """

  defstruct [:socket, :mod, buffer: ""]

  @timeout 5_000

  def connect!(port, opts \\ []) do
    sock_opts = [:binary, active: false, packet: :raw]

    {mod, {:ok, socket}} =
      case Keyword.get(opts, :tls) do
        nil -> {:gen_tcp, :gen_tcp.connect(~c"127.0.0.1", port, sock_opts, @timeout)}
        tls -> {:ssl, :ssl.connect(~c"127.0.0.1", port, sock_opts ++ tls, @timeout)}
      end

    %__MODULE__{socket: socket, mod: mod}
  end

  @doc "A command as RESP bytes: an array of bulk strings."
  def encode(args) do
    [
      ?*,
      Integer.to_string(length(args)),
      "\r\n" | Enum.map(args, &["$", Integer.to_string(byte_size(&1)), "\r\n", &1, "\r\n"])
    ]
  end

  def send_raw(%{mod: mod, socket: socket}, bytes), do: mod.send(socket, bytes)

  def send_commands(client, commands), do: send_raw(client, Enum.map(commands, &encode/1))

  @doc "Sends one command and returns its reply."
  def call(client, args) do
    :ok = send_commands(client, [args])
    recv(client, 1)
  end

  @doc "Sends `commands` in one write (pipelined) and returns their replies."
  def calls(client, commands) do
    :ok = send_commands(client, commands)
    recv(client, Enum.count(commands))
  end

  @doc "Connects and authenticates with `token` (`AUTH token` answers OK)."
  def auth!(port, token, opts \\ []) do
    c = connect!(port, opts)
    {[{:simple, "OK"}], c} = call(c, ["AUTH", token])
    c
  end

  @doc "The text of `INFO section`, read on a connection of its own."
  def info!(port, section) do
    c = connect!(port)
    {[info], _} = call(c, ["INFO", section])
    close(c)
    info
  end

  @doc "Reads `count` replies; returns them and the client."
  def recv(client, count, timeout \\ @timeout), do: recv(client, count, timeout, [])

  defp recv(client, 0, _timeout, acc), do: {Enum.reverse(acc), client}

  defp recv(client, count, timeout, acc) do
    case read(client.buffer) do
      {:ok, reply, rest} ->
        recv(%{client | buffer: rest}, count - 1, timeout, [reply | acc])

      :more ->
        case client.mod.recv(client.socket, 0, timeout) do
          {:ok, data} -> recv(%{client | buffer: client.buffer <> data}, count, timeout, acc)
          {:error, reason} -> raise "recv failed after #{length(acc)} replies: #{inspect(reason)}"
        end
    end
  end

  @doc "Sends one command and returns the bytes of its reply, as they came."
  def call_raw(client, args) do
    :ok = send_commands(client, [args])
    recv_raw(client)
  end

  @doc "Reads the bytes of one reply."
  def recv_raw(client) do
    case read(client.buffer) do
      {:ok, _reply, rest} ->
        size = byte_size(client.buffer) - byte_size(rest)
        {binary_part(client.buffer, 0, size), %{client | buffer: rest}}

      :more ->
        {:ok, data} = client.mod.recv(client.socket, 0, @timeout)
        recv_raw(%{client | buffer: client.buffer <> data})
    end
  end

  @doc "Reads until the server closes; returns the bytes that came."
  def recv_until_closed(client, acc \\ []) do
    case client.mod.recv(client.socket, 0, @timeout) do
      {:ok, data} -> recv_until_closed(client, [acc | data])
      {:error, :closed} -> IO.iodata_to_binary([client.buffer | acc])
    end
  end

  def close(%{mod: mod, socket: socket}), do: mod.close(socket)

  @doc "Reads one reply off the front of `bytes`."
  def read(bytes) do
    case :binary.match(bytes, "\r\n") do
      :nomatch ->
        :more

      {at, 2} ->
        <<type, line::binary-size(at - 1), "\r\n", rest::binary>> = bytes
        value(type, line, rest)
    end
  end

  defp value(?+, line, rest), do: {:ok, {:simple, line}, rest}
  defp value(?-, line, rest), do: {:ok, {:error, line}, rest}
  defp value(?:, line, rest), do: {:ok, String.to_integer(line), rest}
  defp value(?,, line, rest), do: {:ok, {:double, line}, rest}
  defp value(?#, line, rest), do: {:ok, {:bool, line == "t"}, rest}
  defp value(?_, "", rest), do: {:ok, nil, rest}
  defp value(?$, "-1", rest), do: {:ok, nil, rest}
  defp value(?*, "-1", rest), do: {:ok, nil, rest}
  defp value(?$, size, rest), do: blob(String.to_integer(size), rest, & &1)

  defp value(?=, size, rest),
    do: blob(String.to_integer(size), rest, &{:verbatim, binary_part(&1, 4, byte_size(&1) - 4)})

  defp value(?*, count, rest), do: items(String.to_integer(count), rest, [], & &1)
  defp value(?~, count, rest), do: items(String.to_integer(count), rest, [], &{:set, &1})
  defp value(?>, count, rest), do: items(String.to_integer(count), rest, [], &{:push, &1})

  defp value(?%, count, rest),
    do: items(2 * String.to_integer(count), rest, [], &{:map, pairs(&1)})

  defp blob(size, rest, wrap) do
    case rest do
      <<bytes::binary-size(size), "\r\n", rest::binary>> -> {:ok, wrap.(bytes), rest}
      _ -> :more
    end
  end

  defp items(0, rest, acc, wrap), do: {:ok, wrap.(Enum.reverse(acc)), rest}

  defp items(n, rest, acc, wrap) do
    case read(rest) do
      {:ok, item, rest} -> items(n - 1, rest, [item | acc], wrap)
      :more -> :more
    end
  end

  defp pairs([k, v | rest]), do: [{k, v} | pairs(rest)]
  defp pairs([]), do: []
end

defmodule Ringbus.Resp.ClientCommands do
  @moduledoc false
  # CLIENT ID, LIST, INFO and KILL: the clients of the RESP listener this
  # connection came through, as `Ringbus.Server.Clients` lists them from
  # the counters each connection publishes (no connection is asked). A
  # client's line has Redis's `key=value` form with the fields Ringbus
  # knows: id, addr, name, age, idle, flags, db, omem (output not yet taken
  # by the kernel), tot-net-in, tot-net-out, tot-cmds, user, and multi for
  # the client's own line. Fields it does not measure but clients parse as
  # integers (redis-py's CLIENT INFO) are there as 0 (sub, psub: no pub/sub
  # here) or -1 (multi, on other clients' lines: not known), and qbuf,
  # qbuf-free, argv-mem, obl, oll, tot-mem as 0.

  alias Ringbus.Resp.Encoder
  alias Ringbus.Server.{Auth, Clients, Directory}

  import Ringbus.Resp.Args, only: [upcase: 1]
  import Ringbus.Resp.Errors, only: [syntax_error: 0, no_permission: 0]

  @doc "This connection's id: the one CLIENT LIST shows for it."
  @spec id(map()) :: pos_integer()
  def id(s) do
    case Directory.own_connection() do
      %{id: id} -> id
      nil -> s.id
    end
  end

  @doc "Publishes the name CLIENT SETNAME gave, for CLIENT LIST."
  @spec named(String.t() | nil) :: :ok
  def named(name), do: Directory.name_connection(name)

  @doc "CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id ...]"
  def list(args, s) do
    with {:ok, filter} <- list_filter(args) do
      {lines(Enum.filter(clients(), filter)), s}
    else
      :error -> {syntax_error(), s}
    end
  end

  defp list_filter([]), do: {:ok, fn _ -> true end}

  defp list_filter([type, kind]) do
    case {upcase(type), String.downcase(kind)} do
      {"TYPE", "normal"} ->
        {:ok, fn _ -> true end}

      {"TYPE", other} when other in ["master", "replica", "slave", "pubsub"] ->
        {:ok, fn _ -> false end}

      {"ID", id} ->
        ids([id])

      _ ->
        :error
    end
  end

  defp list_filter([id_word | ids]) do
    if upcase(id_word) == "ID", do: ids(ids), else: :error
  end

  defp ids(ids) do
    parsed = for id <- ids, do: Integer.parse(id)

    if Enum.all?(parsed, &match?({n, ""} when n > 0, &1)),
      do: {:ok, &(&1.id in Enum.map(parsed, fn {n, ""} -> n end))},
      else: :error
  end

  @doc "CLIENT INFO: this connection's line."
  def info(s) do
    case Enum.find(clients(), &(&1.pid == self())) do
      nil -> {"", s}
      client -> {line(client), s}
    end
  end

  @doc """
  CLIENT KILL ip:port (the old form: OK, or an error if no client has that
  address) or CLIENT KILL [ID id] [ADDR ip:port] [USER default] [TYPE
  normal] [SKIPME yes|no] (how many were closed). Needs every grant: a
  token limited to some channels may not close other clients.
  """
  def kill(args, s) do
    cond do
      s.grants != Auth.all() -> {no_permission(), s}
      match?([_], args) -> kill_addr(hd(args), s)
      true -> kill_filters(args, s)
    end
  end

  defp kill_addr(addr, s) do
    case Enum.filter(clients(), &(&1.peer == addr)) do
      [] -> {Encoder.error("ERR No such client"), s}
      found -> {close(found), s}
    end
  end

  defp kill_filters(args, s) do
    case kill_filter(args, [], true) do
      {:ok, tests, skipme} ->
        found =
          Enum.filter(clients(), fn c ->
            Enum.all?(tests, & &1.(c)) and not (skipme and c.pid == self())
          end)

        close(found)
        {Enum.count(found), s}

      :error ->
        {syntax_error(), s}
    end
  end

  defp kill_filter([], tests, skipme), do: {:ok, tests, skipme}

  defp kill_filter([key, value | rest], tests, skipme) do
    case {upcase(key), value} do
      {"ID", id} ->
        case Integer.parse(id) do
          {n, ""} -> kill_filter(rest, [(&(&1.id == n)) | tests], skipme)
          _ -> :error
        end

      {"ADDR", addr} ->
        kill_filter(rest, [(&(&1.peer == addr)) | tests], skipme)

      {"USER", user} ->
        kill_filter(rest, [fn _ -> user == "default" end | tests], skipme)

      {"TYPE", type} ->
        normal = String.downcase(type) == "normal"
        kill_filter(rest, [fn _ -> normal end | tests], skipme)

      {"SKIPME", yes_no} ->
        case String.downcase(yes_no) do
          "yes" -> kill_filter(rest, tests, true)
          "no" -> kill_filter(rest, tests, false)
          _ -> :error
        end

      _ ->
        :error
    end
  end

  defp kill_filter(_odd, _tests, _skipme), do: :error

  defp close(clients) do
    Enum.each(clients, &Clients.close(&1.pid))
    {:simple, "OK"}
  end

  # The clients of the listener this connection came through.
  defp clients do
    case Directory.own_connection() do
      %{port: port} ->
        Enum.filter(Clients.list(), &(&1.protocol == :resp and &1.port == port))

      nil ->
        []
    end
  end

  defp lines(clients), do: Enum.map_join(clients, &line/1)

  defp line(c) do
    [
      "id=#{c.id}",
      "addr=#{c.peer}",
      "name=#{c.name}",
      "age=#{div(c.age_ms, 1000)}",
      "idle=#{div(c.idle_ms, 1000)}",
      "flags=N",
      "db=0",
      "sub=0",
      "psub=0",
      "multi=-1",
      "qbuf=0",
      "qbuf-free=0",
      "argv-mem=0",
      "obl=0",
      "oll=0",
      "omem=#{c.pending_bytes}",
      "tot-mem=0",
      "tot-net-in=#{c.bytes_in}",
      "tot-net-out=#{c.bytes_out}",
      "tot-cmds=#{c.frames_in}",
      "user=default"
    ]
    |> Enum.join(" ")
    |> Kernel.<>("\n")
  end
end

defmodule Ringbus.Server.Stats do
  @moduledoc false
  # A server's figures, and the log lines of its connections.
  #
  # Every server has one `:counters` array (made by `Ringbus.Server`, held in
  # its config), which its acceptors and connections bump and which
  # `Ringbus.Server.stats/1` and `Ringbus.Metrics` read without asking any
  # process. Connections bump it once per read and once per write, never per
  # message:
  #
  #   accepted, accept_errors, refused   by the acceptors
  #   handshaking, open                  connections now, by state: one up
  #                                      when a connection enters a state,
  #                                      one down when it leaves it
  #   frames_in, frames_out              frames read and written
  #   bytes_in, bytes_out
  #   errors, one per code               ERROR frames and failed PUSH_ACKS
  #                                      entries sent, by error code; for
  #                                      RESP, error replies by their code
  #                                      (ERR, NOGROUP, ...; see resp_codes/0)
  #   closed, one per reason             see `close_reasons/0`
  #   push_ack histogram                 server time from the read that
  #                                      carried pushes (XADDs) to the write
  #                                      of their acks: one bucket per power
  #                                      of 2 µs (`Ringbus.Histogram`), its
  #                                      sum and count, added
  #                                      once per read with the read's
  #                                      number of acks as weight
  #
  # Each connection also keeps a `t:tally/0` of its own, which becomes the
  # line it logs when it closes, and publishes its figures in a small
  # `:counters` array of its own (see `@own`), listed with its peer in
  # `Ringbus.Server.Directory`, so that `Ringbus.Server.clients/0` reads
  # every connection without asking one. A connection logs one line when it
  # opens and one when it closes, with its protocol (binary or resp), its
  # peer, why it closed and what it did, and a warning when it closes a
  # client that stopped reading (`:send_timeout`): never a line per frame or
  # per message.
  #
  # Refused connections (at `max_connections`) are counted by the acceptors
  # and logged by their listener, as one count a second at most
  # (`refused/2`, `refused_since/2`): a flood of them is one line a second.

  require Logger

  alias Ringbus.Wire.ErrorCode

  @names [
    :accepted,
    :accept_errors,
    :refused,
    :handshaking,
    :open,
    :frames_in,
    :frames_out,
    :bytes_in,
    :bytes_out
  ]

  # Slots no figure shows: 1 while the listener has been told of refusals
  # it has not logged yet.
  @private [:refusals_reported]

  # Why a connection closed: the peer closed it, a socket error, a write
  # that waited past :send_timeout, the process crashed, or the connection
  # error the server sent (its code's name: idle_timeout, shutting_down,
  # bad_frame, ...).
  @close_reasons [:peer_closed, :socket_error, :send_timeout, :crashed] ++
                   for({reason, code, _} <- ErrorCode.all(), code < 100, do: reason)

  @codes for {reason, _code, _} <- ErrorCode.all(), do: reason

  # The codes of the error replies the RESP front end sends; any other
  # counts as "other", so the families stay bounded.
  @resp_codes ~w(ERR NOAUTH NOPERM NOGROUP BUSYGROUP WRONGPASS NOPROTO WRONGTYPE other)

  # The push-to-ack histogram's slots (`Ringbus.Histogram`), named for @slots.
  @histogram Enum.map(1..Ringbus.Histogram.slots(), &{:push_ack, &1})

  @slots (@names ++
            @histogram ++
            @private ++
            Enum.map(@codes, &{:error, &1}) ++
            Enum.map(@resp_codes, &{:resp_error, &1}) ++
            Enum.map(@close_reasons, &{:closed, &1}))
         |> Enum.with_index(1)
         |> Map.new()

  @push_ack Map.fetch!(@slots, {:push_ack, 1})

  @type counters :: :counters.counters_ref()

  # A connection's own counters: bumped with the server's, once per read
  # and per write; `pending` is the output it holds, `open` 1 after HELLO
  # (or AUTH), `last_read` the monotonic ms of its last read.
  @own %{
    frames_in: 1,
    frames_out: 2,
    bytes_in: 3,
    bytes_out: 4,
    pending: 5,
    open: 6,
    last_read: 7
  }

  @typedoc "One connection's own figures, for the line it logs when it closes."
  @type tally :: %{
          counters: counters(),
          own: counters(),
          peer: String.t(),
          kind: :tcp | :tls,
          protocol: atom(),
          state: :handshaking | :open,
          since: integer(),
          frames_in: non_neg_integer(),
          frames_out: non_neg_integer(),
          bytes_in: non_neg_integer(),
          bytes_out: non_neg_integer(),
          reason: atom() | nil,
          arrived: integer() | nil,
          acks: non_neg_integer()
        }

  @doc "A server's counters, all zero."
  @spec new() :: counters()
  def new, do: :counters.new(map_size(@slots), [:write_concurrency])

  @doc "Why connections close, as `counts/1` names them under `:closed`."
  @spec close_reasons() :: [atom()]
  def close_reasons, do: @close_reasons

  @doc "Counts one accepted connection or accept error."
  @spec count(counters(), :accepted | :accept_errors) :: :ok
  def count(counters, what) when what in [:accepted, :accept_errors], do: add(counters, what, 1)

  @doc """
  Counts a connection refused at `max_connections`; the first refusal since
  the listener last logged them is sent to `listener` as `:refused`, so a
  flood of them is one message, not one each.
  """
  @spec refused(counters(), pid()) :: :ok
  def refused(counters, listener) do
    add(counters, :refused, 1)

    # Two acceptors may both see 0 and both send: the listener takes either.
    if get(counters, :refusals_reported) == 0 do
      put(counters, :refusals_reported, 1)
      send(listener, :refused)
    end

    :ok
  end

  @doc """
  A listener starts (or restarts) logging refusals: nothing is reported
  yet; returns the refusals so far, which it will not log again.
  """
  @spec refusals_reset(counters()) :: non_neg_integer()
  def refusals_reset(counters) do
    put(counters, :refusals_reported, 0)
    get(counters, :refused)
  end

  @doc """
  The listener's side of `refused/2`: logs how many connections were
  refused since `logged` (the count it last logged), and returns the count
  now and whether more came in while it logged (it should log again later).
  """
  @spec refused_since(counters(), non_neg_integer(), String.t(), pos_integer()) ::
          {non_neg_integer(), boolean()}
  def refused_since(counters, logged, where, max_connections) do
    now = get(counters, :refused)
    n = now - logged

    if n > 0 do
      Logger.warning(
        "Ringbus refused #{n} #{if n == 1, do: "connection", else: "connections"} " <>
          "on #{where} in the last second: max_connections (#{max_connections}) reached"
      )
    end

    put(counters, :refusals_reported, 0)
    # A refusal between the read above and the reset saw the flag still set.
    {now, get(counters, :refused) > now}
  end

  @doc "The codes RESP error replies are counted by (their first word)."
  @spec resp_codes() :: [String.t()]
  def resp_codes, do: @resp_codes

  @doc """
  What the counters hold: a map of the figures above, with `:errors` (by
  error code: the binary protocol's reasons, or for `:resp` the codes of
  `resp_codes/0`) and `:closed` (by reason) as maps of every reason to its
  count.
  """
  @spec counts(counters(), :binary | :resp) :: map()
  def counts(counters, protocol \\ :binary) do
    base = Map.new(@names, &{&1, get(counters, &1)})

    errors =
      if protocol == :resp,
        do: Map.new(@resp_codes, &{&1, get(counters, {:resp_error, &1})}),
        else: Map.new(@codes, &{&1, get(counters, {:error, &1})})

    Map.merge(base, %{
      push_ack: histogram(counters),
      errors: errors,
      closed: Map.new(@close_reasons, &{&1, get(counters, {:closed, &1})})
    })
  end

  defp histogram(counters), do: Ringbus.Histogram.read(counters, @push_ack)

  defp get(counters, key), do: :counters.get(counters, Map.fetch!(@slots, key))

  defp add(counters, key, n), do: :counters.add(counters, Map.fetch!(@slots, key), n)

  defp put(counters, key, n), do: :counters.put(counters, Map.fetch!(@slots, key), n)

  ## A connection's tally

  @doc """
  A connection of `protocol` (`:binary`, `:resp`) has its socket: counts it
  as handshaking, lists it in the directory and logs the line that says so.
  """
  @spec opened(counters(), atom(), Ringbus.Socket.t(), Ringbus.Socket.socket()) :: tally()
  def opened(counters, protocol, transport, socket) do
    add(counters, :handshaking, 1)
    kind = transport.name()
    peer = peer(transport, socket)
    Logger.info("Ringbus #{protocol} connection from #{peer} opened (#{kind})")
    own = :counters.new(map_size(@own), [])
    now = System.monotonic_time(:millisecond)
    :counters.put(own, @own.last_read, now)

    :ok =
      Ringbus.Server.Directory.register_connection(%{
        id: :erlang.unique_integer([:positive, :monotonic]),
        protocol: protocol,
        port: local_port(transport, socket),
        peer: peer,
        kind: kind,
        since: now,
        counters: own,
        # For the output the kernel has not taken yet, and for
        # Ringbus.Server.close_client/1 to shut the socket down.
        transport: transport,
        socket: socket,
        name: nil
      })

    %{
      own: own,
      counters: counters,
      peer: peer,
      kind: kind,
      protocol: protocol,
      state: :handshaking,
      since: System.monotonic_time(:millisecond),
      frames_in: 0,
      frames_out: 0,
      bytes_in: 0,
      bytes_out: 0,
      reason: nil,
      arrived: nil,
      acks: 0
    }
  end

  defp local_port(transport, socket) do
    case transport.sockname(socket) do
      {:ok, {_ip, port}} -> port
      {:error, _} -> nil
    end
  end

  @doc """
  What a connection listed in the directory publishes, read without asking
  it: `info` as it registered, with its state, age, idle time, frames and
  bytes, and the output it holds (in its buffer and, on TCP, in the
  socket's queue).
  """
  @spec connection(pid(), map()) :: map()
  def connection(pid, %{counters: own} = info) do
    now = System.monotonic_time(:millisecond)
    get = &:counters.get(own, Map.fetch!(@own, &1))

    queued = info.transport.queued(info.socket)

    %{
      id: info.id,
      pid: pid,
      protocol: info.protocol,
      port: info.port,
      peer: info.peer,
      name: info.name,
      kind: info.kind,
      state: if(get.(:open) == 1, do: :open, else: :handshaking),
      age_ms: now - info.since,
      idle_ms: now - get.(:last_read),
      frames_in: get.(:frames_in),
      frames_out: get.(:frames_out),
      bytes_in: get.(:bytes_in),
      bytes_out: get.(:bytes_out),
      pending_bytes: get.(:pending) + queued
    }
  end

  defp peer(transport, socket) do
    case transport.peername(socket) do
      {:ok, {ip, port}} -> "#{:inet.ntoa(ip)}:#{port}"
      {:error, _} -> "an unknown peer"
    end
  end

  @doc "HELLO was answered: the connection moves from handshaking to open."
  @spec open(tally()) :: tally()
  def open(%{state: :open} = tally), do: tally

  def open(tally) do
    add(tally.counters, :handshaking, -1)
    add(tally.counters, :open, 1)
    :counters.put(tally.own, @own.open, 1)
    %{tally | state: :open}
  end

  @doc """
  A read of `bytes` bytes held `frames` (the frames the session is about to
  walk); it `arrived` at that monotonic time (native units).
  """
  @spec read(tally(), [term()], non_neg_integer(), integer()) :: tally()
  def read(tally, frames, bytes, arrived \\ System.monotonic_time()) do
    n = frames_in(frames, 0)
    add(tally.counters, :frames_in, n)
    add(tally.counters, :bytes_in, bytes)
    :counters.add(tally.own, @own.frames_in, n)
    :counters.add(tally.own, @own.bytes_in, bytes)
    :counters.put(tally.own, @own.last_read, System.monotonic_time(:millisecond))
    %{tally | frames_in: tally.frames_in + n, bytes_in: tally.bytes_in + bytes, arrived: arrived}
  end

  # A group of PUSHes the decoder took together counts as its frames.
  defp frames_in([{:pushes, _name, count, _, _, _} | rest], n), do: frames_in(rest, n + count)
  defp frames_in([_ | rest], n), do: frames_in(rest, n + 1)
  defp frames_in([], n), do: n

  @doc """
  Frames about to be encoded for the client: counted, and every error among
  them (ERROR frames, failed PUSH_ACKS entries) counted by its code.
  """
  @spec wrote(tally(), [tuple()]) :: tally()
  def wrote(tally, frames) do
    {n, acks} = wrote(tally.counters, frames, 0, 0)
    add(tally.counters, :frames_out, n)
    :counters.add(tally.own, @own.frames_out, n)
    %{tally | frames_out: tally.frames_out + n, acks: tally.acks + acks}
  end

  defp wrote(counters, [{:error, _corr, code, _message} | rest], n, acks) do
    error(counters, code)
    wrote(counters, rest, n + 1, acks)
  end

  defp wrote(counters, [{:push_acks, count, acks} | rest], n, acked) do
    ack_errors(counters, acks)
    wrote(counters, rest, n + 1, acked + count)
  end

  defp wrote(counters, [_frame | rest], n, acks), do: wrote(counters, rest, n + 1, acks)
  defp wrote(_counters, [], n, acks), do: {n, acks}

  defp ack_errors(counters, [{_corr, {:error, code}} | rest]) do
    error(counters, code)
    ack_errors(counters, rest)
  end

  defp ack_errors(counters, [_ok | rest]), do: ack_errors(counters, rest)
  defp ack_errors(_counters, []), do: :ok

  defp error(counters, code) when code in @codes, do: add(counters, {:error, code}, 1)
  defp error(_counters, _unknown), do: :ok

  @doc """
  A RESP error reply is about to be written: counted by its code, the first
  word of its text (`ERR`, `NOGROUP`, ...). `counters` may be nil (a session
  outside a server).
  """
  @spec resp_error(counters() | nil, binary()) :: :ok
  def resp_error(nil, _text), do: :ok

  def resp_error(counters, text) do
    code =
      case :binary.match(text, " ") do
        {at, _} -> binary_part(text, 0, at)
        :nomatch -> text
      end

    add(counters, {:resp_error, if(code in @resp_codes, do: code, else: "other")}, 1)
  end

  @doc "`count` replies were written (for a protocol whose output is not frames)."
  @spec replied(tally(), non_neg_integer()) :: tally()
  def replied(tally, count) do
    add(tally.counters, :frames_out, count)
    :counters.add(tally.own, @own.frames_out, count)
    %{tally | frames_out: tally.frames_out + count}
  end

  @doc "`count` push acks (RESP: XADD replies) are among the replies of the last read."
  @spec acked(tally(), non_neg_integer()) :: tally()
  def acked(tally, 0), do: tally
  def acked(tally, count), do: %{tally | acks: tally.acks + count}

  @doc """
  `bytes` bytes went to the socket. The acks among them are timed from
  their read's arrival, once for the read, weighted by their count.
  """
  @spec flushed(tally(), non_neg_integer()) :: tally()
  def flushed(tally, bytes) do
    add(tally.counters, :bytes_out, bytes)
    :counters.add(tally.own, @own.bytes_out, bytes)
    :counters.put(tally.own, @own.pending, 0)
    tally = %{tally | bytes_out: tally.bytes_out + bytes}

    case tally do
      %{acks: 0} -> tally
      %{arrived: nil} -> %{tally | acks: 0}
      %{acks: n, arrived: at} -> observe(tally, System.monotonic_time() - at, n)
    end
  end

  defp observe(tally, native, n) do
    us = System.convert_time_unit(native, :native, :microsecond)
    Ringbus.Histogram.observe(tally.counters, @push_ack, us, n)
    %{tally | acks: 0}
  end

  @doc "The connection holds `bytes` of output not yet written."
  @spec pending(tally(), non_neg_integer()) :: tally()
  def pending(tally, bytes) do
    :counters.put(tally.own, @own.pending, bytes)
    tally
  end

  @doc """
  Why the connection is closing, when it knows: the first reason given
  stands. `:send_timeout` is logged as a warning at once.
  """
  @spec closing(tally(), atom()) :: tally()
  def closing(%{reason: nil} = tally, :send_timeout) do
    Logger.warning(
      "Ringbus #{tally.protocol} connection from #{tally.peer} closed: it did not read what it was sent " <>
        "within the server's send_timeout (slow consumer)"
    )

    %{tally | reason: :send_timeout}
  end

  def closing(%{reason: nil} = tally, reason), do: %{tally | reason: reason}
  def closing(tally, _reason), do: tally

  @doc "The connection has ended: it leaves its state's count and logs its line."
  @spec closed(tally(), atom()) :: :ok
  def closed(tally, reason) do
    %{reason: reason} = closing(tally, reason)
    add(tally.counters, tally.state, -1)
    add(tally.counters, {:closed, if(reason in @close_reasons, do: reason, else: :crashed)}, 1)
    ms = System.monotonic_time(:millisecond) - tally.since

    Logger.info(
      "Ringbus #{tally.protocol} connection from #{tally.peer} closed (#{reason}) after #{ms} ms: " <>
        "#{tally.frames_in} frames in, #{tally.frames_out} out, " <>
        "#{tally.bytes_in} bytes in, #{tally.bytes_out} out"
    )
  end
end

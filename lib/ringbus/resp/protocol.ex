defmodule Ringbus.Resp.Protocol do
  @moduledoc false
  # RESP as a `Ringbus.Server.Protocol`, run by `Ringbus.Server.Connection`
  # like the binary protocol. The codec is `Ringbus.Resp.Parser`, the session
  # `Ringbus.Resp.Session` and, here, the timer of a waiting command. Output
  # is iodata: the replies, encoded by the session.
  #
  # Waiting commands (XREAD BLOCK). The session subscribes to the streams
  # and says how long to wait; batches arrive as `{:ringbus, sub, messages,
  # lost}` messages like any other, and a timer here (`{:resp_timeout,
  # token}`) ends the wait. Meanwhile this answers `:wait`, so the connection
  # holds the reads that arrive until the wait ends.
  #
  # Limits. Before AUTH, when tokens are required, the parser keeps the
  # limits Redis puts on unauthenticated clients; from the first read after
  # it, the server's own.
  #
  # Figures: a command counts as a frame in and a reply as a frame out, both
  # when the command is read; its XADDs are the read's acks, timed from its
  # arrival to the write that follows it (an XADD queued behind a waiting
  # XREAD BLOCK is answered later than that write).

  @behaviour Ringbus.Server.Protocol

  alias Ringbus.Group
  alias Ringbus.Resp.{Parser, Session, StreamCommands}
  alias Ringbus.Server.{Config, Protocol, Stats}

  @anonymous_args 16
  @anonymous_bulk 16 * 1024
  @max_args 1_048_576

  defstruct [:session, timer: nil]

  @doc """
  The RESP listener of a server, when `:resp_port` is set: its counters
  are made here, in the calling supervisor, which owns them for as long as
  the server runs. Its figures show the consumer groups of the streams
  this node homes (`Ringbus.Group`, one table per node).
  """
  @impl true
  def listener(%Config{resp_port: nil}), do: nil

  def listener(%Config{} = config) do
    context = Session.context()

    %Protocol{
      figures: fn -> %{groups: groups()} end,
      name: :resp,
      port: config.resp_port,
      module: __MODULE__,
      # Redis's `timeout 0`: RESP clients idle as long as they like, by default.
      config: %{config | idle_timeout: config.resp_idle_timeout},
      arg: context,
      busy: "-ERR max number of clients reached\r\n"
    }
  end

  # The node's groups, each with the name of its stream; those of a stream
  # deleted (whose rows are going) are not shown.
  defp groups do
    case Group.summary() do
      [] ->
        []

      groups ->
        names = for name <- Ringbus.channels(), into: %{}, do: {incarnation(name), name}

        for %{incarnation: incarnation} = g <- groups, Map.has_key?(names, incarnation) do
          g |> Map.delete(:incarnation) |> Map.put(:stream, Map.fetch!(names, incarnation))
        end
    end
  end

  defp incarnation(name) do
    case Ringbus.incarnation(name) do
      {:ok, incarnation} -> incarnation
      _gone -> nil
    end
  end

  @impl true
  def init(config, context) do
    session = Session.new(config, context)
    max = config.max_frame_size

    parser =
      if Session.authenticated?(session),
        do: Parser.new(@max_args, max, max),
        else: Parser.new(@anonymous_args, @anonymous_bulk, max)

    {parser, %__MODULE__{session: session}}
  end

  @impl true
  def decode(data, parser, %__MODULE__{session: session}) do
    case Parser.feed(unlimit(parser, session), data) do
      {:ok, commands, parser} -> {:ok, commands, parser}
      {:error, message, commands} -> {:error, message, commands, parser}
    end
  end

  # Authenticated: the parser takes the server's full limits from now on.
  defp unlimit(%{max_args: @anonymous_args} = parser, session) do
    if Session.authenticated?(session),
      do: Parser.limit(parser, @max_args, session.config.max_frame_size),
      else: parser
  end

  defp unlimit(parser, _session), do: parser

  @impl true
  def count(commands, tally) do
    {n, xadds} = count(commands, 0, 0)
    tally |> Stats.acked(xadds) |> Stats.replied(n)
  end

  defp count([[name | _] | rest], n, xadds),
    do: count(rest, n + 1, if(StreamCommands.xadd?(name), do: xadds + 1, else: xadds))

  defp count([_ | rest], n, xadds), do: count(rest, n + 1, xadds)
  defp count([], n, xadds), do: {n, xadds}

  @impl true
  def handle_items(commands, state),
    do: after_session(state, Session.handle(commands, state.session))

  @impl true
  def handle_message({:ringbus, sub, messages, lost}, state),
    do: after_session(state, Session.deliver(state.session, sub, messages, lost))

  def handle_message({:ringbus_closed, sub, reason}, state),
    do: after_session(state, Session.closed(state.session, sub, reason))

  def handle_message({:resp_group_destroyed, key, group}, state),
    do: after_session(state, Session.group_destroyed(state.session, key, group))

  def handle_message({:resp_timeout, token}, state),
    do: after_session(state, Session.timeout(state.session, token))

  def handle_message(_unexpected, state), do: {:continue, [], state}

  # QUIT is the client's close.
  defp after_session(state, {status, out, session}) do
    state = %{state | session: session}

    case status do
      :ok -> {:continue, out, cancel_timer(state)}
      {:block, token, timeout} -> {:wait, out, arm_timer(state, token, timeout)}
      {:close, _quit} -> {{:close, :peer_closed}, out, state}
    end
  end

  defp arm_timer(%{timer: {token, _}} = state, token, _timeout), do: state

  defp arm_timer(state, token, timeout) do
    state = cancel_timer(state)

    ref =
      if timeout == :infinity,
        do: nil,
        else: Process.send_after(self(), {:resp_timeout, token}, timeout)

    %{state | timer: {token, ref}}
  end

  defp cancel_timer(%{timer: nil} = state), do: state

  defp cancel_timer(%{timer: {_token, ref}} = state) do
    if ref, do: Process.cancel_timer(ref)
    %{state | timer: nil}
  end

  @impl true
  def open?(%__MODULE__{session: session}), do: Session.authenticated?(session)

  @impl true
  def fatal(:timeout, %{session: session}) do
    reason = if Session.authenticated?(session), do: :idle_timeout, else: :handshake_timeout
    {reason, Session.fatal(session, :timeout)}
  end

  def fatal(:shutting_down, %{session: session}),
    do: {:shutting_down, Session.fatal(session, :shutting_down)}

  def fatal(message, %{session: session}), do: {:bad_frame, Session.fatal(session, message)}

  @impl true
  def encode(out, tally), do: {out, IO.iodata_length(out), tally}

  @impl true
  def terminate(%{session: session}), do: Session.gone(Session.cancel(session))
end

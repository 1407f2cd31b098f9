defmodule Ringbus.Server.BinaryProtocol do
  @moduledoc false
  # The binary protocol of docs/PROTOCOL.md as a `Ringbus.Server.Protocol`:
  # the codec is `Ringbus.Wire.Decoder` (the first frame with the pre-HELLO
  # limit, every later byte with `max_frame_size`, consecutive acked pushes
  # to one channel grouped, large batches packed), the session `Ringbus.Server.Session`, which
  # holds the subscriptions and their credit. Output is frames. It never
  # waits: subscription batches become DELIVER frames as they come, each
  # subscription sending at most the credit its client gave, and a
  # GROUP_FETCH that waits (version 5) waits in a process of its own, linked
  # to the connection, which sends its answer here and is killed if the
  # connection ends first. The connection stays its consumer's owner.

  @behaviour Ringbus.Server.Protocol

  alias Ringbus.Server.{Fetches, Protocol, Session, Stats}
  alias Ringbus.Wire.{Decoder, Frame}

  # A PUSH_BATCH of more payloads than this stays the bytes it came in
  # (`Ringbus.Wire.Entries`) until the channel stores it, and is stored
  # alone; smaller ones join the pushes around them (`Session`).
  @pack_batches 64

  @impl true
  def listener(config) do
    %Protocol{
      name: :binary,
      port: config.port,
      module: __MODULE__,
      config: config,
      busy: Frame.encode({:error, 0, :server_busy, "the server has too many connections"})
    }
  end

  @impl true
  def init(config, _arg) do
    decoder =
      Decoder.new(config.max_frame_size,
        first: Frame.max_hello_frame_size(),
        accept: :requests,
        group_pushes: config.max_payload_size,
        pack_batches: @pack_batches
      )

    {decoder, Session.new(config)}
  end

  @impl true
  def decode(data, decoder, _session) do
    case Decoder.feed(decoder, data) do
      {:ok, frames, decoder} -> {:ok, frames, decoder}
      {:error, reason, frames} -> {:error, reason, frames, decoder}
    end
  end

  # Frames are counted as they are read and written (`Stats.wrote/2`).
  @impl true
  def count(_frames, tally), do: tally

  @impl true
  def handle_items(frames, session) do
    case Session.handle(frames, session) do
      {:ok, out, session} -> {:continue, out, start_fetches(session)}
      {{:close, _reason} = close, out, session} -> {close, out, start_fetches(session)}
    end
  end

  defp start_fetches(%Session{fetches: fetches} = session) do
    {starts, fetches} = Fetches.take_starts(fetches)
    connection = self()

    fetches =
      Enum.reduce(starts, fetches, fn {corr, fun}, fetches ->
        pid = spawn_link(fn -> send(connection, {:ringbus_fetched, self(), fun.()}) end)
        Fetches.started(fetches, pid, corr)
      end)

    %{session | fetches: fetches}
  end

  defp fetched(session, pid, result) do
    {out, fetches} = Fetches.finished(session.fetches, pid, result)
    {:continue, out, %{session | fetches: fetches}}
  end

  @impl true
  def handle_message({:ringbus, sub, messages, lost}, session),
    do: {:continue, Session.deliver(session, sub, messages, lost), session}

  def handle_message({:ringbus_closed, sub, reason}, session) do
    {out, session} = Session.closed(session, sub, reason)
    {:continue, out, session}
  end

  def handle_message({:ringbus_fetched, pid, frames}, session),
    do: fetched(session, pid, {:ok, frames})

  # A waiting fetch's process that died before it answered; one that
  # answered is no longer the session's.
  def handle_message({:EXIT, pid, reason}, session), do: fetched(session, pid, reason)

  def handle_message(_unexpected, session), do: {:continue, [], session}

  @impl true
  def open?(session), do: Session.open?(session)

  @impl true
  def fatal(:shutting_down, session), do: {:shutting_down, Session.shutdown_frames(session)}

  def fatal(reason, session) do
    {reason, frame} = Session.fatal_frame(session, reason)
    {reason, [frame]}
  end

  @impl true
  def encode(frames, tally), do: encode(frames, [], 0, Stats.wrote(tally, frames))

  defp encode([frame | rest], acc, bytes, tally) do
    data = Frame.encode(frame)
    encode(rest, [acc | data], bytes + IO.iodata_length(data), tally)
  end

  defp encode([], acc, bytes, tally), do: {acc, bytes, tally}

  @impl true
  def terminate(session) do
    for pid <- Fetches.pids(session.fetches), do: Process.exit(pid, :kill)
    :ok
  end
end

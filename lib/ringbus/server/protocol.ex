defmodule Ringbus.Server.Protocol do
  @moduledoc false
  # What a server's connection speaks: a behaviour, and the struct of one
  # listener. Ranch's `ranch_protocol` in spirit, with thousand_island's
  # handler for the shape: one process, `Ringbus.Server.Connection`, owns the
  # socket, the reads (active-N, re-armed when passive), the deadlines, the
  # output buffer and its flush, back-pressure, the figures and the graceful
  # shutdown; a protocol module is what is its own and nothing more:
  #
  #   Ringbus.Server.BinaryProtocol   docs/PROTOCOL.md: subscriptions, credit
  #   Ringbus.Resp.Protocol           docs/RESP.md: blocked reads, their timers
  #
  # A protocol keeps two things, both data the connection holds for it:
  #
  #   codec     the incremental decoder of its input; `decode/3` only
  #   session   everything else; every other callback
  #
  # Order of calls. `listener/1` once per server start, in the server's
  # supervisor (which owns what it makes: RESP's groups table). Then per
  # connection: `init/2` before the socket is handed over; for each read
  # while the protocol does not wait, `decode/3`, `count/2` and, if the read
  # held items, `handle_items/2`; every message the connection does not
  # know (subscription batches, closed subscriptions, the protocol's own
  # timers) to `handle_message/2`; `fatal/2` when the connection closes it
  # on an error, a deadline or a shutdown; `terminate/1` last, always once.
  #
  # What a callback may rely on:
  #   - it runs in the connection process, the subscriber of every
  #     subscription the session makes; timers it starts send to it;
  #   - nothing is written between two callbacks: output goes out after a
  #     read, when the mailbox is empty, or at 64 KiB;
  #   - while it answers `:wait`, no read is decoded: reads are held, as
  #     they came, and decoded in order once a callback answers `:continue`;
  #     the socket is armed again only once they have run, so what queues is
  #     one arming's reads; there is no idle deadline meanwhile;
  #   - `open?/1` is asked after each callback: once true, the connection
  #     counts as open and each read that held items must come within
  #     `:idle_timeout` of the one before; until then, within
  #     `:handshake_timeout` of the accept.
  #
  # A callback must not touch the socket, block, or do a selective receive
  # on older messages than the calls it makes (fresh references only).

  alias Ringbus.Server.{Config, Stats}

  @enforce_keys [:name, :port, :module, :config, :busy]
  defstruct @enforce_keys ++ [arg: nil, figures: nil]

  @typedoc """
  One listener: its `name` (the protocol in figures and logs), its `port`,
  the protocol `module` and the `config` and `arg` each connection's
  `init/2` gets; `busy` is what a TCP client refused over
  `:max_connections` is sent before the close. `figures`, when given,
  returns figures of the protocol's own for `Ringbus.Metrics` (RESP: its
  consumer groups), read without asking a process; it is listed with the
  server in `Ringbus.Server.Directory`, so the metrics need not know it.
  """
  @type t :: %__MODULE__{
          name: atom(),
          port: :inet.port_number(),
          module: module(),
          config: Config.t(),
          arg: term(),
          busy: iodata(),
          figures: (() -> map()) | nil
        }

  @type codec :: term()
  @type session :: term()
  @typedoc "The protocol's output: whatever its `encode/2` takes; `[]` is nothing."
  @type out :: term()

  @typedoc """
  What every session callback answers: the output, in order, and then

    * `:continue` - go on reading;
    * `:wait` - a command waits for a message (XREAD BLOCK): hold reads;
    * `{:close, reason}` - write the output and close; `reason` is the
      close reason of the figures and the log line (`Ringbus.Server.Stats`).
  """
  @type result :: {:continue | :wait | {:close, atom()}, out(), session()}

  @doc """
  The listener of this protocol for a server's `config` (its counters
  made), or `nil` when the config asks for none. Runs in the server's
  supervisor.
  """
  @callback listener(config :: Config.t()) :: t() | nil

  @doc "A new connection's codec and session; no socket yet."
  @callback init(config :: Config.t(), arg :: term()) :: {codec(), session()}

  @doc """
  Cuts one read into items, all those complete. An error gives the items
  before it; they are handled, then the connection closes with `fatal/2`.
  """
  @callback decode(data :: binary(), codec(), session()) ::
              {:ok, [term()], codec()} | {:error, reason :: term(), [term()], codec()}

  @doc """
  The figures a read adds beyond its items and bytes, which the connection
  has counted already (`Ringbus.Server.Stats.read/4`).
  """
  @callback count(items :: [term()], Stats.tally()) :: Stats.tally()

  @doc "Answers the items of one read, in order."
  @callback handle_items(items :: [term()], session()) :: result()

  @doc """
  A message the connection does not know: `{:ringbus, sub, messages, lost}`,
  `{:ringbus_closed, sub, reason}`, the protocol's timers, anything else
  (answer `{:continue, [], session}`).
  """
  @callback handle_message(message :: term(), session()) :: result()

  @doc "Whether the handshake is done (HELLO, AUTH): see the module's header."
  @callback open?(session()) :: boolean()

  @doc """
  What the connection writes before it closes for `reason`: a `decode/3`
  error, `:timeout` (its deadline passed) or `:shutting_down`; with the close
  reason for the figures.
  """
  @callback fatal(reason :: term(), session()) :: {atom(), out()}

  @doc "The bytes of some output, their count, and the tally with it counted."
  @callback encode(out(), Stats.tally()) :: {iodata(), non_neg_integer(), Stats.tally()}

  @doc "The connection has ended, however it did: release what the session holds."
  @callback terminate(session()) :: :ok
end

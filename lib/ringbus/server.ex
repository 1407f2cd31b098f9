defmodule Ringbus.Server do
  @moduledoc """
  The Ringbus network server: channels over TCP or TLS, speaking the binary
  protocol of `docs/PROTOCOL.md` and, when `:resp_port` is set, Redis's RESP
  on a second port (`Ringbus.Resp`, `docs/RESP.md`).

  Start it from the command line with `mix ringbus.server`, or embed it in an
  application's supervision tree:

      children = [
        {Ringbus.Server, port: 7171, tokens: %{"s3cret" => :all}}
      ]

  ## Process tree

      Ringbus.Server (Supervisor, rest_for_one)
      ├── Ringbus.Server.Listener              owns the listening socket and
      │                                        the accept counters
      ├── Ringbus.Server.ConnectionSupervisor  one Ringbus.Server.Connection
      │                                        each, at most :max_connections
      ├── acceptors (Supervisor)               :acceptors Ringbus.Server.Acceptor
      │
      │   with :resp_port, the same three for RESP clients:
      ├── Ringbus.Server.Listener
      ├── Ringbus.Server.ConnectionSupervisor  one Ringbus.Server.Connection
      │                                        each, speaking RESP
      └── acceptors (Supervisor)

  Every listener's connections are the same process; what differs is the
  protocol module it runs (`Ringbus.Server.Protocol`): the binary
  protocol's, always, and each of `:protocols` that asks for a listener.

  If a listener dies, the processes after it restart (a binary listener's
  death restarts the RESP listener too); a connection that dies takes nothing with it, since channels live
  in `Ringbus.Store`. See `lib/ringbus/server/README.md` for how a connection
  reads, writes and stays safe under a backlog.

  ## Large frames and the VM's memory

  A frame of several MB is joined into one binary of its size, and that
  binary is above the binary allocator's single-block carrier threshold, so
  it gets fresh memory of its own: page faults for every 4 KB of it. A VM
  with a super carrier keeps freed carriers' pages and hands them to the next
  large frame. Servers that take multi-MB frames should run with one:

      ELIXIR_ERL_OPTIONS="+MMscs 4096 +MMsco false" mix ringbus.server

  `+MMscs` is the super carrier's size in MB (virtual address space; pages
  are used as needed), `+MMsco false` lets allocations go on outside it when
  it is full. Memory freed inside it stays with the VM rather than going back
  to the OS. README's `frames` bench section has the figures with and
  without one. `mix ringbus.server` says at start-up whether the VM has one.

  ## Options

    * `:host` - the address to bind, an IP tuple or string. Default `{127, 0, 0, 1}`.
    * `:port` - the port, `0` for any free one (see `port/1`). Default `7171`.
    * `:resp_port` - a second port speaking Redis's RESP (`Ringbus.Resp`), or
      `nil` for none. Redis's port, 6379 (`Ringbus.Resp.default_port/0`), is
      the one `mix ringbus.server --resp` uses; `0` takes any free one (see `port/2`).
      It shares every other option: TLS, tokens (`AUTH token`) and limits,
      `:max_connections` counting each listener's clients apart. Default `nil`.
    * `:tls` - `:ssl` server options, with `:certfile`/`:keyfile` (or
      `:cert`/`:key`), to serve TLS instead of plain TCP. Default `nil`.
    * `:tokens` - `nil` (no auth, the default) or a map of token to grants:
      `:all`, or `[read: prefixes, write: prefixes, manage: prefixes]` where
      prefixes is `:all` or a list of channel name prefixes (a grant left out
      is none). Read covers READ, LEN, INFO and SUBSCRIBE; write covers PUSH,
      PUSH_BATCH and PULL (a pull removes messages); manage covers CREATE and
      DELETE. With tokens, a HELLO without a valid one is refused. See the
      rights table in `docs/PROTOCOL.md`, section 3.
    * `:auto_create` - channel options (see `Ringbus.Channel`) for channels
      created by their first push, which needs only the write grant, or
      `false` to answer such pushes with `no_channel`.
      Default `[capacity: 100_000, overflow: :drop_oldest]`.
    * `:resp_stream_max_bytes` - the payload bytes a stream created over RESP
      holds (its channel's `:max_bytes`); past them an XADD overwrites the
      oldest entries, counted as `overwritten` (`docs/RESP.md`). Default 64 MiB.
    * `:resp_stream_replicas` - `nil`, or `n`: a stream created over RESP is
      then a replicated, durable channel (`Ringbus.create/2`'s `replicas:
      n`), on this node and `n - 1` connected ones. Default `nil` (memory).
    * `:max_frame_size` - the largest frame accepted, in bytes; a longer
      length prefix closes the connection. Default 16 MiB.
    * `:handshake_timeout` - ms for the TLS handshake and HELLO. Default `5_000`.
    * `:idle_timeout` - ms within which each frame must be complete after the
      one before, or `:infinity`. Clients ping to stay connected. Default `300_000`.
    * `:resp_idle_timeout` - the same for RESP clients, which Redis lets idle
      (its `timeout 0`). Default `:infinity`.
    * `:send_timeout` - ms a write may wait on a client that does not read
      before the connection closes. Default `30_000`.
    * `:shutdown_timeout` - ms each connection has, when the server stops,
      to answer the requests it has read (acks included), write
      `ERROR shutting_down` and close; then it is killed. Connections stop
      together, so a stop takes about this long at most. Default `5_000`.
    * `:max_connections` - connections at once; more are refused with
      `server_busy`. Default `1024`.
    * `:max_subscriptions` - subscriptions per connection. Default `64`.
    * `:max_credit` - the most credit a subscription may hold, in messages.
      Default `10_000`.
    * `:max_out_bytes` - bytes queued for one client before its connection
      stops and waits for it (the socket's high watermark). The queue holds
      at most two more writes past it, each the answers to one read or one
      `DELIVER`. Default 4 MiB.
    * `:acceptors` - accepting processes. Default `4`.
    * `:buffer_size` - socket buffer sizes, in bytes: the kernel's send and
      receive buffers and the size of one read. Default 256 KiB, which keeps
      each read below the binary allocator's single-block carrier threshold
      (512 KB by default, `+MBsbct`), so reads reuse memory instead of taking
      a fresh mmap each (README's `ingest` bench section).
    * `:protocols` - the protocols served besides the binary one: modules
      implementing `Ringbus.Server.Protocol` (an internal contract), each
      listening when the options ask for it. Default: the `:ringbus`
      application's `:protocols` environment, `[Ringbus.Resp.Protocol]`,
      whose listener runs when `:resp_port` is set.
    * `:name` - a name to register the server supervisor under.

  Unknown options raise `ArgumentError`.
  """

  use Supervisor

  alias Ringbus.Server.{Acceptor, BinaryProtocol, Config, ConnectionSupervisor, Listener}
  alias Ringbus.Server.{Protocol, Stats}

  @typedoc "A listener of the server: `:binary` (the protocol), `:resp`, or another protocol's name."
  @type protocol :: :binary | :resp | atom()

  @type option ::
          {:host, :inet.ip_address() | String.t()}
          | {:port, :inet.port_number()}
          | {:resp_port, :inet.port_number() | nil}
          | {:tls, [:ssl.tls_server_option()] | nil}
          | {:tokens, %{String.t() => :all | keyword()} | nil}
          | {:auto_create, Ringbus.Channel.options() | false}
          | {:resp_stream_max_bytes, pos_integer()}
          | {:resp_stream_replicas, pos_integer() | nil}
          | {:max_frame_size, pos_integer()}
          | {:handshake_timeout, pos_integer()}
          | {:idle_timeout, pos_integer() | :infinity}
          | {:resp_idle_timeout, pos_integer() | :infinity}
          | {:send_timeout, pos_integer() | :infinity}
          | {:shutdown_timeout, pos_integer()}
          | {:max_connections, pos_integer()}
          | {:max_subscriptions, pos_integer()}
          | {:max_credit, pos_integer()}
          | {:max_out_bytes, pos_integer()}
          | {:acceptors, pos_integer()}
          | {:buffer_size, pos_integer()}
          | {:protocols, [module()]}
          | {:name, atom()}

  @type options :: [option()]

  @doc "Starts a server linked to the caller. See the module doc for the options."
  @spec start_link(options()) :: Supervisor.on_start()
  def start_link(opts \\ []) do
    config = Config.new!(opts)
    sup_opts = if config.name, do: [name: config.name], else: []
    Supervisor.start_link(__MODULE__, config, sup_opts)
  end

  @doc """
  The port a listener of the server is bound to (useful after `port: 0`):
  the binary protocol's, or with `:resp` the RESP listener's.
  """
  @spec port(Supervisor.supervisor(), protocol()) :: :inet.port_number()
  def port(server, protocol \\ :binary),
    do: Listener.info(Listener.whereis(server, protocol)).port

  @doc """
  A listener's figures: `connections` open now, and since it started,
  `accepted`, `accept_errors` and `refused` (over `:max_connections`).
  """
  @spec stats(Supervisor.supervisor(), protocol()) :: %{atom() => non_neg_integer()}
  def stats(server, protocol \\ :binary) do
    sup = ConnectionSupervisor.whereis(server, protocol)
    %{active: active} = DynamicSupervisor.count_children(sup)
    counts = Stats.counts(Listener.info(Listener.whereis(server, protocol)).counters)
    counts |> Map.take([:accepted, :accept_errors, :refused]) |> Map.put(:connections, active)
  end

  @doc """
  Every client connection of every server on this node, like Redis's
  `CLIENT LIST` or NATS's `/connz`: one map per connection, oldest first.

    * `:id` - a number unique on this node, growing with each connection
    * `:pid` - its process
    * `:protocol` (`:binary` or `:resp`) and `:port` - the listener it came to
    * `:peer` - the client's address, `"ip:port"`
    * `:name` - the name a RESP client gave with `CLIENT SETNAME`, or nil
    * `:kind` - `:tcp` or `:tls`
    * `:state` - `:handshaking` (before HELLO, or AUTH when required) or `:open`
    * `:age_ms` - since it was accepted; `:idle_ms` - since its last read
    * `:frames_in`, `:frames_out` - frames (RESP: commands and replies)
    * `:bytes_in`, `:bytes_out`
    * `:pending_bytes` - output written by the server and not yet taken by
      the kernel: the connection's buffer and, on TCP, its socket's queue

  It asks no connection: each publishes these in counters of its own as it
  reads and writes, so a busy connection delays nothing. A connection that
  is still in its TLS handshake is not listed yet.
  """
  @spec clients() :: [map()]
  defdelegate clients, to: Ringbus.Server.Clients, as: :list

  @doc """
  Closes the connection of `pid` (a client of `clients/0`) as if its peer
  had closed it: its socket is shut down, and the connection ends, counted
  and logged as `peer_closed`. `{:error, :no_client}` if it is not listed.
  """
  @spec close_client(pid()) :: :ok | {:error, :no_client}
  defdelegate close_client(pid), to: Ringbus.Server.Clients, as: :close

  @doc "The processes of a listener's connections open now, one per client."
  @spec connections(Supervisor.supervisor(), protocol()) :: [pid()]
  def connections(server, protocol \\ :binary) do
    sup = ConnectionSupervisor.whereis(server, protocol)
    for {_, pid, _, _} <- DynamicSupervisor.which_children(sup), is_pid(pid), do: pid
  end

  @impl true
  def init(config) do
    children =
      Enum.flat_map([BinaryProtocol | config.protocols], fn module ->
        # Each listener's counters are made here, so that they outlive a
        # restart of the listener; its connections find them in the config.
        config = %{config | counters: Stats.new()}

        case module.listener(config) do
          nil -> []
          protocol -> listener_children(config, protocol)
        end
      end)

    Supervisor.init(children, strategy: :rest_for_one)
  end

  defp listener_children(config, %Protocol{name: name} = protocol) do
    acceptors =
      for i <- 1..config.acceptors do
        Supervisor.child_spec({Acceptor, {self(), config, protocol}}, id: {Acceptor, i})
      end

    [
      {Listener, {config, protocol}},
      {ConnectionSupervisor, {config, name}},
      %{
        id: {:acceptors, name},
        start: {Supervisor, :start_link, [acceptors, [strategy: :one_for_one]]},
        type: :supervisor
      }
    ]
  end
end

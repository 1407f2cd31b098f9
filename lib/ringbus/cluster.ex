defmodule Ringbus.Cluster do
  @moduledoc """
  Ringbus across nodes: every channel has one home node, and the `Ringbus`
  API works on any channel from any node of the cluster.

  The cluster is distributed Erlang with OTP's own `:pg` and `:net_kernel`;
  nothing else is needed. Start the nodes with names and one cookie, and
  tell each which nodes to join:

      # config/runtime.exs of every node
      config :ringbus, :cluster, join: [:"a@10.0.0.1", :"b@10.0.0.2"]

  or at runtime with `join/1`, or from the command line with
  `mix ringbus.server --name NAME --join NODE,... --cookie C`.

      :ok = Ringbus.create("orders", capacity: 100_000, node: :"b@10.0.0.2")
      {:ok, seq} = Ringbus.push("orders", "hello")     # from any node
      {:ok, :"b@10.0.0.2"} = Ringbus.Cluster.home("orders")

  ## Placement

  A channel lives on the node that created it, or on the one `create/2`'s
  `:node` option names. Every node resolves any name to its home with one
  ETS read (`home/1`); the directory behind it converges after joins,
  leaves and restarts. Two nodes creating one name at once get one winner;
  the other gets `{:error, :exists}`.

  ## One API everywhere

  `Ringbus.push/2`, `push_many/2`, `pull/1`, `read/3`, `len/1`, `info/1`,
  `subscribe/2`, `subscriptions/2`, `ack/2`, `unsubscribe/1` and `delete/1` take the same
  arguments and return the same values on any node. A channel of this node
  takes the local path, unchanged: the cluster adds nothing to it. A channel
  of another node goes through the link to that node. Such a call has
  three outcomes, never a false one (see "In a cluster" in `Ringbus`):
  done, not done (any error but `:timeout`), or unknown:

    * `{:error, :node_down}` - not done: the node is not connected (or has
      no link yet): it died, or went silent for longer than `net_ticktime`.
    * `{:error, :node_busy}` - not done: at once, the node has left this
      node's traffic unacknowledged for `:busy_timeout`, or the link holds
      `:max_buffer_bytes` waiting for the distribution buffer; or the
      request was still waiting in the link after `:call_timeout`, and was
      dropped unsent.
    * `{:error, :timeout}` - unknown: the request left for the node and no
      answer came within `:reply_timeout` (or the node went down
      meanwhile). It may or may not have been carried out; a push retried
      after it may be stored twice.

  No caller ever waits on a remote process or on the distribution buffer:
  a call waits on its local link, at most `:call_timeout` ms for its
  request to leave and `:reply_timeout` ms in all. Creates wait for the
  other nodes' votes, at most `:create_timeout` (and a create or delete of
  another node's channel, twice that, for both).

  The two timeouts answer two questions. Whether to send: a request that
  cannot leave within `:call_timeout` (5 ms) is dropped and refused, so a
  stalled link fails calls fast and certainly. How long to wait for a
  request that may be carried out: `:reply_timeout` (100 ms, the same as
  `:busy_timeout`, after which the link is busy and new calls are refused
  at once anyway). A shorter `:reply_timeout` bounds a caller's wait more
  tightly at the cost of more unknown outcomes under load (at 5 ms, a
  scheduler stall of the home node, or a push of a few MB, answers
  `:timeout`); a longer one (seconds) turns more of them into real answers,
  but a caller whose request went to a node that then stalls waits that
  long (at most, and until the node is declared down: then at once).

  Messages from one producer keep their order across the wire. A remote
  subscription gets the same `{:ringbus, sub, messages, lost}` batches
  within its credit, and `lost` stays exact: a batch the link had to drop
  counts in the next one's `lost`.

  ## Node failure

  When a home node dies or goes silent, its channels answer
  `{:error, :node_down}` (or `node_busy` until the silence is noticed) and
  its remote subscribers get `{:ringbus_closed, sub, :node_down}`. When it
  is back, links heal by themselves and its channels are reachable again.
  **Channels live in memory: a node that restarted brings its channels back
  empty**, with their options (replication is not part of Ringbus yet). A
  node that was only silent (paused, partitioned) keeps its messages.

  How fast a silent node is noticed is the VM's `net_ticktime` (60 s by
  default): a node is declared down after `net_ticktime` ± 25% without
  traffic. Set it on every node alike, for example with
  `ELIXIR_ERL_OPTIONS="-kernel net_ticktime 10"` or
  `mix ringbus.server --net-ticktime 10`.

  ## Options

  Set in the application environment, `config :ringbus, :cluster, [...]`,
  read when Ringbus starts:

    * `:join` - nodes to connect to and keep connected to. Default `[]`.
    * `:call_timeout` - ms a request may wait in this node's link before
      it leaves for the remote node; after that it is dropped unsent and
      the caller gets `{:error, :node_busy}`. Default `5`.
    * `:reply_timeout` - ms, from the start of the call, a caller waits for
      the answer to a request that has left; after that it gets
      `{:error, :timeout}`. At least `:call_timeout` in effect. Default
      `100`.
    * `:busy_timeout` - ms after which a batch the remote node has not
      acknowledged makes its link busy: calls to it then return
      `{:error, :node_busy}` without waiting, until it catches up.
      Default `100`.
    * `:create_timeout` - ms a create waits for the other nodes to agree.
      Default `1_000`.
    * `:max_buffer_bytes` - bytes a link holds for its node while the
      distribution buffer is full. Default 4 MiB.
    * `:batch_bytes` - bytes after which a link sends without waiting for
      its mailbox to empty. Default 256 KiB.
    * `:reconnect_interval` - ms between connection attempts to a member
      that is not connected. Default `250`.

  Unknown options or bad values make Ringbus fail to start with an
  `ArgumentError`. `lib/ringbus/cluster/README.md` explains the processes
  and the protocols.
  """

  alias Ringbus.Store
  alias Ringbus.Cluster.{Directory, Links, Members, Router}

  @typedoc "One link's figures in `info/0`."
  @type link_info :: Links.info()

  @typedoc "What `info/0` returns."
  @type info :: %{
          node: node(),
          members: [node()],
          channels: %{node() => non_neg_integer()},
          links: %{node() => link_info()}
        }

  @doc """
  Adds `nodes` to the nodes this node connects to and keeps connected to,
  and tries them now. Returns `{:error, :not_alive}` on a node that was not
  started as a distributed node.
  """
  @spec join([node()]) :: :ok | {:error, :not_alive}
  def join(nodes) when is_list(nodes) do
    cond do
      not Enum.all?(nodes, &is_atom/1) ->
        raise ArgumentError, "expected a list of node names, got: #{inspect(nodes)}"

      Node.alive?() ->
        Members.join(nodes)

      true ->
        {:error, :not_alive}
    end
  end

  @doc """
  Forgets `node`, a node that will not come back: this node's directory
  drops the channels homed on it, so their names answer
  `{:error, :no_channel}` here and can be created again (on this node or
  another). Returns how many channels it forgot, or `{:error, :node_up}`
  while `node` is connected (or is this node). Run it on every node that
  still knows the channels; from a release:

      bin/ringbus rpc 'Ringbus.Cluster.forget_node(:"b@host")'

  If the node does come back, it announces its channels again, and a name
  created meanwhile elsewhere is resolved as after a partition: the
  older create wins.
  """
  @spec forget_node(node()) :: {:ok, non_neg_integer()} | {:error, :node_up}
  def forget_node(node) when is_atom(node), do: Directory.forget(node)

  @doc """
  Every channel of the cluster as this node's directory knows it, name =>
  home node: this node's own, and those the other nodes announced. A read
  of ETS here, no call, so no node is asked and a silent one delays
  nothing: the channels of a node that is down or silent are listed with
  it as their home (calls to them answer `node_down` or `node_busy`), and
  a channel created elsewhere a moment ago may not be listed yet.
  `Ringbus.channels/0` lists this node's only.
  """
  @spec channels() :: %{term() => node()}
  def channels do
    local = for name <- Store.names(), into: %{}, do: {name, node()}
    Map.merge(Map.new(Directory.entries()), local)
  end

  @doc "This node and the members connected to it now, this node first."
  @spec members() :: [node()]
  def members, do: Members.members()

  @doc """
  The home node of channel `name`, from this node's directory: a read of
  ETS, no call.
  """
  @spec home(term()) :: {:ok, node()} | {:error, :no_channel}
  def home(name), do: Router.home(name)

  @doc """
  The cluster as this node sees it, read without asking any process:

    * `:node` - this node
    * `:members` - this node and the members connected now
    * `:channels` - how many channels of each other node this node's
      directory holds
    * `:links` - per remote node: `:state` (`:up`, `:busy` or `:down`),
      `:queued_bytes` (held for the distribution buffer), and since this
      node started: `:batches` sent, `:drops` (requests refused or expired,
      subscription batches and directory messages dropped for room) and
      `:suspensions` (times the distribution buffer refused a batch that a
      plain send would have waited on); and the calls to its channels
      from this node by outcome: `:calls_ok` (answered, errors such as
      `:no_channel` included), `:calls_refused` (`:node_busy` or
      `:node_down`: not carried out) and `:calls_timeout` (unknown outcome).
  """
  @spec info() :: info()
  def info do
    %{
      node: node(),
      members: members(),
      channels: Directory.remote_channels(),
      links: Links.info()
    }
  end
end

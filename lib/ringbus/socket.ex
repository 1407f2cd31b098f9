defmodule Ringbus.Socket do
  @moduledoc false
  # A transport: the socket calls the server's connections and the client
  # make, as a behaviour (ranch's `ranch_transport`) with two modules,
  # `Ringbus.Socket.TCP` (`:gen_tcp`) and `Ringbus.Socket.TLS` (`:ssl`).
  # The module is chosen once, when a server listens (TLS if it has `:tls`
  # options) or a client connects (its `:transport` option), and goes with
  # the socket from then on: every call is `transport.call(socket, ...)`, one
  # module call with no dispatch on a kind, and the owner of an active
  # socket matches its messages on the tags `messages/0` names.
  #
  # A socket delivers reads as messages, a number at a time: the owner asks
  # with `setopts(socket, active: reads(largest, buffer))`, and gets
  # `{data, socket, bytes}` messages, then `{passive, socket}`.
  #
  # Writes never wait for the socket (see `Ringbus.Socket.TCP` and
  # `Ringbus.Socket.TLS` for how each does it).

  @type t :: module()
  @type socket :: :gen_tcp.socket() | :ssl.sslsocket()
  @type listen_socket :: :gen_tcp.socket() | :ssl.sslsocket()
  @type address :: {:inet.ip_address(), :inet.port_number()}

  @doc "What logs, metrics and `Ringbus.Server.clients/0` call the transport: `:tcp` or `:tls`."
  @callback name() :: :tcp | :tls

  @doc """
  The tags of an active socket's messages: `{data, socket, bytes}`,
  `{passive, socket}`, `{closed, socket}` and `{error, socket, reason}`.
  """
  @callback messages() :: {data :: atom(), passive :: atom(), closed :: atom(), error :: atom()}

  @doc "Listens on `port` with `options` (the transport's own among them)."
  @callback listen(port :: :inet.port_number(), options :: keyword()) ::
              {:ok, listen_socket()} | {:error, term()}

  @doc "Accepts a connection, waiting `timeout` ms at most (then `{:error, :timeout}`)."
  @callback accept(listen_socket(), timeout()) :: {:ok, socket()} | {:error, term()}

  @doc """
  Completes an accepted connection's handshake within `timeout` (TLS's; for
  TCP there is none): only then may the server read or write it.
  """
  @callback handshake(socket(), timeout()) :: {:ok, socket()} | {:error, term()}

  @doc "Connects to `host`:`port` with `options`, within `timeout`, handshake included."
  @callback connect(
              host :: :inet.hostname() | :inet.ip_address(),
              port :: :inet.port_number(),
              options :: keyword(),
              timeout()
            ) :: {:ok, socket()} | {:error, term()}

  @callback controlling_process(socket(), pid()) :: :ok | {:error, term()}

  @callback setopts(socket(), options :: keyword()) :: :ok | {:error, term()}

  @doc """
  Writes `data` without waiting for the peer; on TCP the outcome arrives
  later as `{:inet_reply, socket, :ok | {:error, reason}}`, which the owner
  handles in its loop.
  """
  @callback send(socket(), data :: iodata()) :: :ok | {:error, term()}

  @doc "Reads from a passive socket."
  @callback recv(socket(), length :: non_neg_integer(), timeout()) ::
              {:ok, binary()} | {:error, term()}

  @doc """
  Shuts the socket down, from any process: shut down for reading, its owner
  gets the closed message and ends as when the peer closes.
  """
  @callback shutdown(socket(), how :: :read | :write | :read_write) :: :ok | {:error, term()}

  @doc "Closes a socket or a listening socket."
  @callback close(socket() | listen_socket()) :: :ok

  @callback peername(socket()) :: {:ok, address()} | {:error, term()}

  @callback sockname(socket() | listen_socket()) :: {:ok, address()} | {:error, term()}

  @doc "Bytes written and not yet taken by the kernel, as far as the transport knows (0 if not)."
  @callback queued(socket()) :: non_neg_integer()

  @doc """
  Closes an accepted connection the server refuses before its handshake,
  sending `reply` first where the transport can (TCP; a TLS connection
  before its handshake carries nothing).
  """
  @callback refuse(socket(), reply :: iodata()) :: :ok

  # Reads delivered as messages before the socket goes passive and must be
  # armed again. Each arming costs a synchronous call into the port and a
  # turn of the poller before the next read comes, so a reader of many small
  # reads that arms every few reads spends more on arming than on the reads.
  # What can queue is bounded by the reads of one arming: many while reads
  # are small, few once they fill the buffer (see `reads/2`).
  @min_reads 4
  @max_reads 64
  # The bytes one arming may queue, in buffers, judged by the reads so far.
  @budget_buffers 4

  @doc """
  How many reads to ask for at the next arming, given the largest read since
  the last one and the socket's user buffer (the most one read carries):
  enough to fill #{@budget_buffers} buffers at that size, from #{@min_reads}
  to #{@max_reads}. So at most #{@max_reads} reads queue, and once reads fill
  the buffer, #{@min_reads}. A first arming, with no read yet, asks for
  #{@min_reads}.

      iex> Ringbus.Socket.reads(200, 256 * 1024)
      64
      iex> Ringbus.Socket.reads(256 * 1024, 256 * 1024)
      4
      iex> Ringbus.Socket.reads(0, 1024)
      4
  """
  @spec reads(non_neg_integer(), pos_integer()) :: pos_integer()
  def reads(0, _buffer), do: @min_reads

  def reads(largest, buffer),
    do: (@budget_buffers * buffer) |> div(largest) |> max(@min_reads) |> min(@max_reads)
end

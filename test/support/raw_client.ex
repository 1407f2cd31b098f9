defmodule Ringbus.Test.RawClient do
  @moduledoc """
  A bare `:gen_tcp` (or `:ssl`) client for protocol tests: it writes frames or
  raw bytes and reads frames back, with nothing of `Ringbus.Client` in between.
  """

  alias Ringbus.Wire.{Decoder, Frame}

  defstruct [:socket, :mod, decoder: Decoder.new(1_073_741_824), frames: []]

  @timeout 5_000

  def connect(port, opts \\ []) do
    sock_opts = [:binary, active: false, packet: :raw]

    {mod, result} =
      case Keyword.get(opts, :tls) do
        nil -> {:gen_tcp, :gen_tcp.connect(~c"127.0.0.1", port, sock_opts, @timeout)}
        tls -> {:ssl, :ssl.connect(~c"127.0.0.1", port, sock_opts ++ tls, @timeout)}
      end

    with {:ok, socket} <- result, do: {:ok, %__MODULE__{socket: socket, mod: mod}}
  end

  def connect!(port, opts \\ []) do
    {:ok, client} = connect(port, opts)
    client
  end

  @doc """
  From now on, reads frames no longer than `max_frame_size`: a longer one
  fails the read, so a test can hold the server to its own limit.
  """
  def limit(client, max_frame_size), do: %{client | decoder: Decoder.new(max_frame_size)}

  @doc "Connects and says HELLO; returns the client and the HELLO_OK limits."
  def hello!(port, opts \\ []) do
    client = connect!(port, opts)
    send_frames(client, [{:hello, 0, 3, 0, Keyword.get(opts, :token)}])
    {[{:hello_ok, 0, 3, limits}], client} = recv(client, 1)
    {client, limits}
  end

  def send_frames(client, frames), do: send_raw(client, Enum.map(frames, &Frame.encode/1))

  def send_raw(%{mod: mod, socket: socket}, bytes), do: mod.send(socket, bytes)

  @doc "Reads until `count` frames have come; returns them and the client."
  def recv(client, count, timeout \\ @timeout)

  def recv(%{frames: frames} = client, count, _timeout) when length(frames) >= count do
    {taken, rest} = Enum.split(frames, count)
    {taken, %{client | frames: rest}}
  end

  def recv(client, count, timeout) do
    case client.mod.recv(client.socket, 0, timeout) do
      {:ok, data} ->
        case Decoder.feed(client.decoder, data) do
          {:ok, new, decoder} ->
            recv(%{client | decoder: decoder, frames: client.frames ++ new}, count, timeout)

          {:error, reason, _frames} ->
            raise "the server sent a bad frame: #{inspect(reason)}"
        end

      {:error, reason} ->
        raise "recv failed after #{length(client.frames)} frames: #{inspect(reason)}"
    end
  end

  @doc "Sends one request and returns the one frame that answers it."
  def call(client, frame) do
    send_frames(client, [frame])
    {[reply], client} = recv(client, 1)
    {reply, client}
  end

  @doc "Reads frames until the server closes; returns them."
  def recv_until_closed(client, acc \\ []) do
    case client.mod.recv(client.socket, 0, @timeout) do
      {:ok, data} ->
        {:ok, new, decoder} = Decoder.feed(client.decoder, data)
        recv_until_closed(%{client | decoder: decoder}, acc ++ new)

      {:error, :closed} ->
        client.frames ++ acc
    end
  end

  def close(%{mod: mod, socket: socket}), do: mod.close(socket)
end

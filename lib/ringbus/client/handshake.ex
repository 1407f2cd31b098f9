defmodule Ringbus.Client.Handshake do
  @moduledoc false
  # A client's HELLO, run in the caller on the passive socket before any
  # process owns it: the server's limits from HELLO_OK, or the error that
  # refused it (the socket is then closed).

  alias Ringbus.Wire.{Decoder, Frame}

  @doc "Says HELLO with `token` and waits `timeout` for the answer."
  @spec hello(Ringbus.Socket.t(), Ringbus.Socket.socket(), binary() | nil, timeout()) ::
          {:ok, map()} | {:error, term()}
  def hello(transport, socket, token, timeout) do
    data = Frame.encode({:hello, 1, Frame.version(), 0, token})

    result =
      with :ok <- transport.send(socket, data),
           {:ok, frame} <- recv_frame(transport, socket, hello_decoder(), timeout) do
        case frame do
          {:hello_ok, 1, _version, limits} -> {:ok, limits}
          {:error, _corr, reason, _message} -> {:error, reason}
          other -> {:error, {:unexpected_frame, elem(other, 0)}}
        end
      end

    with {:error, _} <- result, do: transport.close(socket)
    result
  end

  # Before HELLO_OK the largest frame a server may send is an ERROR.
  defp hello_decoder, do: Decoder.new(Frame.max_error_frame_size(), accept: :responses)

  defp recv_frame(transport, socket, decoder, timeout) do
    with {:ok, data} <- transport.recv(socket, 0, timeout) do
      case Decoder.feed(decoder, data) do
        {:ok, [], decoder} -> recv_frame(transport, socket, decoder, timeout)
        {:ok, [frame | _], _decoder} -> {:ok, frame}
        {:error, reason, _frames} -> {:error, {:bad_frame, reason}}
      end
    end
  end
end

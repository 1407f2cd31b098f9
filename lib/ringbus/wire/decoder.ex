defmodule Ringbus.Wire.Decoder do
  @moduledoc """
  Cuts a byte stream into Ringbus frames, one socket read at a time.

  A connection keeps one decoder and feeds it every read as it comes:

      decoder = Ringbus.Wire.Decoder.new(8 * 1024 * 1024)

      case Ringbus.Wire.Decoder.feed(decoder, bytes) do
        {:ok, frames, decoder} ->
          # every frame completed by this read, oldest first; may be []
          handle(frames)

        {:error, reason, frames} ->
          # the frames before the bad one are good; handle them, then send
          # ERROR with Ringbus.Wire.Decoder.error_code(reason) and close
          handle(frames)
      end

  Frames are the tuples listed in `Ringbus.Wire.Frame`. The server answers the
  pushes among the frames of one `feed/2` with one `PUSH_ACKS` frame.

  ## How bytes are held

    * Frames wholly inside one read are matched out of it by binary pattern
      matching: their fields are sub-binaries of the read, nothing is copied.
    * A frame that a read leaves incomplete is collected as a list of reads
      with a running byte count, and joined with one `IO.iodata_to_binary/1`
      when its last byte arrives. No read is ever appended to a growing
      binary, so a frame of many megabytes costs one copy, not one per read.
    * The length prefix is checked against the max frame size as soon as its
      four bytes are there, before a byte of the body is kept: the header of
      a 1 GB frame is refused with `:frame_too_large` at once.
    * Payloads are sub-binaries of the reads too: whoever keeps one for long
      copies it (a channel does, as it stores it).
    * With `:pack_batches`, a large `PUSH_BATCH`'s payloads are not even
      cut out: its entries stay one binary (`Ringbus.Wire.Entries`), so a
      frame of millions of tiny payloads costs its bytes, not a term each.

  ## Errors

  `feed/2` returns `{:error, reason, frames}` with a reason of
  `t:Ringbus.Wire.Frame.decode_error/0`. After an error the stream cannot be
  resynchronised: the decoder is not returned and the connection must close.
  """

  alias Ringbus.Wire.{Entries, Frame}

  @enforce_keys [:max_frame_size]
  defstruct max_frame_size: nil, first: nil, accept: :any, group: nil, pack: nil, stage: :idle

  @typedoc """
  The decoder's state. What it holds between reads:

    * `:idle` - nothing
    * `{:header, bytes}` - the first 1 to 3 bytes of a length prefix
    * `{:body, length, reads, size}` - a frame of `length` bytes (opcode and
      body) of which `size` bytes have come, as `reads` in reverse order
  """
  @opaque t :: %__MODULE__{
            max_frame_size: non_neg_integer(),
            first: non_neg_integer() | nil,
            accept: Frame.direction(),
            group: non_neg_integer() | nil,
            pack: non_neg_integer() | nil,
            stage:
              :idle | {:header, binary()} | {:body, pos_integer(), [binary()], non_neg_integer()}
          }

  @doc """
  A decoder that refuses frames whose length prefix is above `max_frame_size`.

  The length prefix counts the opcode and the body, not its own four bytes.

  ## Options

    * `:first` - the limit of the first frame instead of `max_frame_size`.
      A server reads `HELLO` with `Ringbus.Wire.Frame.max_hello_frame_size/0`
      and every byte after it with its own limit, however the bytes are
      split into reads. Default: `max_frame_size`.
    * `:accept` - `:requests` (a server), `:responses` (a client) or `:any`.
      A frame whose opcode belongs to the other direction is
      `{:unknown_opcode, byte}`, whatever its body. Default `:any`.
    * `:group_pushes` - a payload size, or `nil` (the default). With a size,
      consecutive acked `PUSH` frames of one read to one channel, each with a
      payload of at most that size, come as one element

          {:pushes, name, count, bytes, corrs, payloads}

      with their correlation ids and payloads newest first, and `bytes` the
      payloads' total: for a server that stores a read's pushes together,
      without a tuple per frame. `expand/1` turns such elements back into
      `PUSH` frames.
    * `:pack_batches` - a count, or `nil` (the default). With a count, a
      `PUSH_BATCH` of more payloads than that has them as one
      `Ringbus.Wire.Entries`, the bytes of its entries, instead of a list:
      for a server, whose memory for a batch then follows its bytes, not
      its count. `expand/1` turns them back into lists.
  """
  @spec new(non_neg_integer(),
          first: non_neg_integer(),
          accept: Frame.direction(),
          group_pushes: non_neg_integer() | nil,
          pack_batches: non_neg_integer() | nil
        ) :: t()
  def new(max_frame_size, opts \\ []) when is_integer(max_frame_size) and max_frame_size >= 0 do
    opts = Keyword.validate!(opts, first: nil, accept: :any, group_pushes: nil, pack_batches: nil)

    %__MODULE__{
      max_frame_size: max_frame_size,
      first: opts[:first],
      accept: opts[:accept],
      group: opts[:group_pushes],
      pack: opts[:pack_batches]
    }
  end

  @doc """
  Frames with every `{:pushes, ...}` element (see `:group_pushes`) turned
  back into the `PUSH` frames it stands for, in order, and every batch's
  `Ringbus.Wire.Entries` (see `:pack_batches`) into its list of payloads.
  """
  @spec expand([Frame.t() | tuple()]) :: [Frame.t()]
  def expand(frames) do
    Enum.flat_map(frames, fn
      {:pushes, name, _count, _bytes, corrs, payloads} ->
        :lists.reverse(corrs)
        |> Enum.zip(:lists.reverse(payloads))
        |> Enum.map(fn {corr, payload} -> {:push, corr, :ack, name, payload} end)

      {:push_batch, corr, mode, name, count, %Entries{} = entries} ->
        [{:push_batch, corr, mode, name, count, Enum.to_list(entries)}]

      {:tagged_push_batch, corr, mode, name, tag, count, %Entries{} = entries} ->
        [{:tagged_push_batch, corr, mode, name, tag, count, Enum.to_list(entries)}]

      frame ->
        [frame]
    end)
  end

  @doc "The bytes held for a frame not yet complete."
  @spec buffered(t()) :: non_neg_integer()
  def buffered(%__MODULE__{stage: :idle}), do: 0
  def buffered(%__MODULE__{stage: {:header, bytes}}), do: byte_size(bytes)
  def buffered(%__MODULE__{stage: {:body, _length, _reads, size}}), do: 4 + size

  @doc """
  Feeds the bytes of one read and returns every frame they complete, in order.

      iex> decoder = Ringbus.Wire.Decoder.new(1024)
      iex> {:ok, [], decoder} = Ringbus.Wire.Decoder.feed(decoder, <<0, 0, 0, 5, 0x0D, 0, 0>>)
      iex> {:ok, frames, _decoder} = Ringbus.Wire.Decoder.feed(decoder, <<0, 1, 0, 0, 0, 5, 0x0D, 0, 0, 0, 2>>)
      iex> frames
      [{:ping, 1}, {:ping, 2}]
  """
  @spec feed(t(), binary()) ::
          {:ok, [Frame.t()], t()} | {:error, Frame.decode_error(), [Frame.t()]}
  def feed(%__MODULE__{stage: :idle} = decoder, bytes) when is_binary(bytes),
    do: split(bytes, decoder, [])

  def feed(%__MODULE__{stage: {:header, head}} = decoder, bytes) when is_binary(bytes) do
    missing = 4 - byte_size(head)

    case bytes do
      <<more::binary-size(missing), rest::binary>> ->
        # At most three bytes from each side: the read itself is not copied.
        <<length::32>> = <<head::binary, more::binary>>
        body(length, rest, decoder, [])

      _ ->
        {:ok, [], %__MODULE__{decoder | stage: {:header, head <> bytes}}}
    end
  end

  def feed(%__MODULE__{stage: {:body, length, reads, size}} = decoder, bytes)
      when is_binary(bytes) do
    missing = length - size

    case bytes do
      <<last::binary-size(missing), rest::binary>> ->
        frame = IO.iodata_to_binary(:lists.reverse(reads, [last]))

        case Frame.decode_body(frame, decoder.accept, decoder.pack) do
          {:ok, frame} -> split(rest, %__MODULE__{decoder | stage: :idle}, [frame])
          {:error, reason} -> {:error, reason, []}
        end

      _ ->
        stage = {:body, length, [bytes | reads], size + byte_size(bytes)}
        {:ok, [], %__MODULE__{decoder | stage: stage}}
    end
  end

  @doc """
  The protocol error code to send for a decoding error.

      iex> Ringbus.Wire.Decoder.error_code({:truncated, :push})
      :bad_frame
  """
  @spec error_code(Frame.decode_error()) :: :frame_too_large | :unknown_opcode | :bad_frame
  def error_code(:frame_too_large), do: :frame_too_large
  def error_code({:unknown_opcode, _opcode}), do: :unknown_opcode
  def error_code(_reason), do: :bad_frame

  # Takes every whole frame off the front of one read; `frames` is in reverse.
  #
  # A PUSH is matched in place, without first cutting its frame out of the
  # read: it is the frame a server sees most, so its cost per message is the
  # server's. The clause takes exactly the frames `Frame.decode_body/2` takes
  # as PUSH and returns what it returns; anything else goes the general way.
  defp split(
         <<length::32, 0x04, corr::32, flags, name_size::16, name::binary-size(name_size),
           size::32, payload::binary-size(size), rest::binary>>,
         %__MODULE__{first: nil, max_frame_size: max, accept: accept} = decoder,
         frames
       )
       when length == 12 + name_size + size and length <= max and flags <= 1 and
              name_size in 1..255 and accept != :responses do
    if flags == 0 and decoder.group != nil and size <= decoder.group,
      do: grouped(rest, decoder, frames, name, 1, size, [corr], [payload]),
      else: split(rest, decoder, [{:push, corr, mode(flags), name, payload} | frames])
  end

  defp split(<<length::32, rest::binary>>, decoder, frames),
    do: body(length, rest, decoder, frames)

  defp split(<<>>, decoder, frames), do: done(decoder, :idle, frames)
  defp split(head, decoder, frames), do: done(decoder, {:header, head}, frames)

  defp mode(0), do: :ack
  defp mode(1), do: :no_ack

  # The acked PUSHes that follow one to the same channel, held in the
  # arguments: nothing is allocated per frame but a cons for its corr and
  # one for its payload.
  defp grouped(
         <<length::32, 0x04, corr::32, 0, name_size::16, name::binary-size(name_size), size::32,
           payload::binary-size(size), rest::binary>>,
         %__MODULE__{max_frame_size: max, group: group} = decoder,
         frames,
         name,
         count,
         bytes,
         corrs,
         payloads
       )
       when length == 12 + name_size + size and length <= max and size <= group,
       do:
         grouped(rest, decoder, frames, name, count + 1, bytes + size, [corr | corrs], [
           payload | payloads
         ])

  defp grouped(rest, decoder, frames, name, count, bytes, corrs, payloads),
    do: split(rest, decoder, [{:pushes, name, count, bytes, corrs, payloads} | frames])

  # The first header is checked against `first`, every later one against
  # `max_frame_size`.
  defp body(length, rest, %__MODULE__{first: nil, max_frame_size: max} = decoder, frames),
    do: checked(length, max, rest, decoder, frames)

  defp body(length, rest, %__MODULE__{first: first} = decoder, frames),
    do: checked(length, first, rest, %__MODULE__{decoder | first: nil}, frames)

  defp checked(length, max, _rest, _decoder, frames) when length > max,
    do: {:error, :frame_too_large, :lists.reverse(frames)}

  defp checked(0, _max, _rest, _decoder, frames),
    do: {:error, :empty_frame, :lists.reverse(frames)}

  defp checked(length, _max, rest, decoder, frames) do
    case rest do
      <<frame::binary-size(length), rest::binary>> ->
        case Frame.decode_body(frame, decoder.accept, decoder.pack) do
          {:ok, frame} -> split(rest, decoder, [frame | frames])
          {:error, reason} -> {:error, reason, :lists.reverse(frames)}
        end

      _ ->
        done(decoder, {:body, length, [rest], byte_size(rest)}, frames)
    end
  end

  defp done(decoder, stage, frames),
    do: {:ok, :lists.reverse(frames), %__MODULE__{decoder | stage: stage}}
end

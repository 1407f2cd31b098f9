defmodule Ringbus.Resp.Entry do
  @moduledoc false
  # How a stream entry is a channel message: its ID is a function of its seq,
  # its field/value pairs are its payload. Pure. `docs/RESP.md` documents
  # both for clients of either protocol.
  #
  # IDs. The message of seq `s` has the ID `<s + 1>-<t>`, where the tag `t`
  # is drawn from the channel's incarnation (`tag/1`: never 0): strictly
  # increasing within an incarnation, never `0-0` (which Redis reserves),
  # and turned back into a seq by taking the part before the dash. An ID a
  # client gives with sequence 0 (or the largest, an incomplete range end)
  # states no incarnation and means what it meant before tags; one with the
  # stream's tag is its entry; one with any other names an incarnation gone
  # (`pin/2`: `:new_incarnation`). The helpers below turn any ID, once
  # pinned or made local, into the seqs it bounds.
  #
  # Payloads. The pairs of one XADD are stored as
  #
  #   0xFF "RBX" 0x01, pairs::u32, then per field and per value: length::u32, bytes
  #
  # (big-endian), which decodes back to the same bytes. A payload that is not
  # exactly that (a message pushed over the binary protocol) reads as the one
  # pair `payload => <its bytes>`; and an XADD of that one pair stores the
  # bytes as they are, so Redis clients and binary clients exchange raw
  # payloads. An XADD `payload` value that would itself decode as pairs is
  # stored encoded, so that every XADD reads back as it was written.

  @magic <<0xFF, "RBX", 1>>
  @raw_field "payload"
  @max_u64 0xFFFF_FFFF_FFFF_FFFF

  @typedoc "A stream ID: milliseconds and sequence, both u64."
  @type id :: {non_neg_integer(), non_neg_integer()}

  @typedoc "The sequence part of a stream's IDs, from its incarnation: never 0."
  @type tag :: pos_integer()

  ## IDs

  @doc "The tag of the IDs of a channel of incarnation `incarnation`: its low 32 bits, odd."
  @spec tag(pos_integer()) :: tag()
  def tag(incarnation), do: Bitwise.bor(Bitwise.band(incarnation, 0xFFFF_FFFF), 1)

  @doc "The ID of seq `seq` of a stream of tag `tag`, as text."
  @spec id(Ringbus.seq(), tag()) :: binary()
  def id(seq, tag), do: Integer.to_string(seq + 1) <> "-" <> Integer.to_string(tag)

  @doc "The ID of seq `seq` of a stream of tag `tag`."
  @spec id_of(Ringbus.seq(), tag()) :: id()
  def id_of(seq, tag), do: {seq + 1, tag}

  @doc """
  An ID a client resumes from, checked against the stream's tag (nil: no
  stream): the stream's own tag becomes 0, so the helpers below read it as
  its entry; sequence 0 or the largest states no incarnation and stays;
  any other names another incarnation.
  """
  @spec pin(id(), tag() | nil) :: {:ok, id()} | {:error, :new_incarnation}
  def pin({_ms, n} = id, _tag) when n == 0 or n == @max_u64, do: {:ok, id}
  def pin({ms, tag}, tag), do: {:ok, {ms, 0}}
  def pin(_id, _tag), do: {:error, :new_incarnation}

  @doc """
  An ID that names entries, made local: the stream's tag becomes 0; an ID
  of another tag stays, and names no entry (`seq/1` answers `:none`).
  """
  @spec local(id(), tag() | nil) :: id()
  def local({ms, tag}, tag), do: {ms, 0}
  def local(id, _tag), do: id

  @doc """
  A position a client gives, as the group layer takes it
  (`t:Ringbus.Group.ref/0`): `fun` turns the ID, pinned (`pin/2`), into
  the seq it bounds. An ID with a tag is a seq of the incarnations of that
  tag only (`mark/1`), so where the groups are, one of another incarnation
  is refused as `pin/2` refuses it.
  """
  @spec position(id(), (id() -> integer())) :: integer() | {integer(), Ringbus.Group.mark()}
  def position({_ms, n} = id, fun) when n == 0 or n == @max_u64, do: fun.(id)
  def position({ms, n}, fun), do: {fun.({ms, 0}), mark(n)}

  @doc """
  An ID that names an entry, as the group layer takes it: its seq, with
  the incarnations of its tag (`mark/1`), or `:none` for `0-n`, which names
  none. Where the groups are, one of another incarnation names none, as
  `local/2` and `seq/1` have it.
  """
  @spec entry(id()) :: integer() | {integer(), Ringbus.Group.mark()} | :none
  def entry({0, _n}), do: :none
  def entry({ms, 0}), do: ms - 1
  def entry({ms, n}), do: {ms - 1, mark(n)}

  @doc """
  The incarnations whose tag (`tag/1`) is `n`, as `t:Ringbus.Group.mark/0`:
  those whose bits 1 to 31 are `n`'s. No incarnation has a tag that is
  even or wider than 32 bits: that mark fits none.
  """
  @spec mark(non_neg_integer()) :: Ringbus.Group.mark()
  def mark(n) when rem(n, 2) == 1 and n <= 0xFFFF_FFFF, do: {0xFFFF_FFFE, n - 1}
  def mark(_n), do: {0xFFFF_FFFE, 1}

  @doc "An ID as text."
  @spec format(id()) :: binary()
  def format({ms, n}), do: Integer.to_string(ms) <> "-" <> Integer.to_string(n)

  @doc "The seq whose ID is `id`, or :none when no seq has it."
  @spec seq(id()) :: {:ok, Ringbus.seq()} | :none
  def seq({ms, 0}) when ms > 0, do: {:ok, ms - 1}
  def seq(_id), do: :none

  @doc "The first seq whose ID is above `id`."
  @spec seq_after(id()) :: Ringbus.seq()
  def seq_after({ms, _n}), do: ms

  @doc "The first seq whose ID is `id` or above."
  @spec seq_from(id()) :: Ringbus.seq()
  def seq_from({ms, 0}), do: max(ms - 1, 0)
  def seq_from({ms, _n}), do: ms

  @doc "The last seq whose ID is `id` or below: -1 when there is none."
  @spec seq_through(id()) :: integer()
  def seq_through({ms, _n}), do: ms - 1

  @doc "The last seq whose ID is below `id`: -1 or less when there is none."
  @spec seq_before(id()) :: integer()
  def seq_before({ms, 0}), do: ms - 2
  def seq_before({ms, _n}), do: ms - 1

  @doc """
  Parses an ID a client gave: `ms-seq`, or `ms` alone, whose sequence is
  `missing` (0 for a range's start, the largest for its end).
  """
  @spec parse(binary(), non_neg_integer()) :: {:ok, id()} | :error
  def parse(text, missing \\ 0) do
    case :binary.split(text, "-") do
      [ms] -> with {:ok, ms} <- u64(ms), do: {:ok, {ms, missing}}
      [ms, n] -> with {:ok, ms} <- u64(ms), {:ok, n} <- u64(n), do: {:ok, {ms, n}}
      _ -> :error
    end
  end

  @doc "The largest ID."
  @spec max_id() :: id()
  def max_id, do: {@max_u64, @max_u64}

  @doc "The largest u64, the sequence of an ID given as `ms` alone at a range's end."
  @spec max_u64() :: non_neg_integer()
  def max_u64, do: @max_u64

  # Redis's string2ull: digits only, at most a u64.
  defp u64(<<c, _::binary>> = digits) when c in ?0..?9 and byte_size(digits) <= 20 do
    case Integer.parse(digits) do
      {n, ""} when n <= @max_u64 -> {:ok, n}
      _ -> :error
    end
  end

  defp u64(_text), do: :error

  ## Payloads

  @doc "The payload that stores one XADD's field/value pairs, given as a flat list."
  @spec encode([binary()]) :: binary()
  def encode([@raw_field, bytes] = pairs) do
    if match?({:ok, _}, decode_pairs(bytes)), do: encode_pairs(pairs), else: bytes
  end

  def encode(pairs), do: encode_pairs(pairs)

  defp encode_pairs(pairs), do: encode_pairs(pairs, 0, <<>>)

  # Appending to a binary grows it in place: one copy at the end.
  defp encode_pairs([bytes | rest], n, acc),
    do: encode_pairs(rest, n + 1, <<acc::binary, byte_size(bytes)::32, bytes::binary>>)

  defp encode_pairs([], n, acc), do: <<@magic, div(n, 2)::32, acc::binary>>

  @doc "The field/value pairs a payload holds, as a flat list."
  @spec decode(binary()) :: [binary()]
  def decode(payload) do
    case decode_pairs(payload) do
      {:ok, pairs} -> pairs
      :error -> [@raw_field, payload]
    end
  end

  defp decode_pairs(<<@magic, count::32, rest::binary>>) when count > 0,
    do: take(rest, 2 * count, [])

  defp decode_pairs(_payload), do: :error

  defp take(<<>>, 0, acc), do: {:ok, :lists.reverse(acc)}

  defp take(<<size::32, bytes::binary-size(size), rest::binary>>, left, acc) when left > 0,
    do: take(rest, left - 1, [bytes | acc])

  defp take(_rest, _left, _acc), do: :error
end

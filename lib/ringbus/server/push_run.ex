defmodule Ringbus.Server.PushRun do
  @moduledoc false
  # How a server session stores a run of pushes and answers them, as
  # functions of data (but for the pushes themselves, through `Ringbus`).
  #
  # A run is `{name, parts, payloads, count, bytes}`: its frames in reverse
  # as parts, and the payloads of those that fit, in reverse, counted and
  # measured as they come. A part is the corr of an acked PUSH that fits;
  # `{corr, mode, n, payload_or_payloads}` for any other PUSH or PUSH_BATCH
  # that fits; `{corr, mode, :too_large}` for one with a payload above
  # max_payload_size. A run is stored with one push of all its payloads,
  # whole or not at all; only when that fails do its frames go one by one,
  # each whole or not at all. Acks are kept in reverse, `{corr, result}`.
  #
  # `session` is a `Ringbus.Server.Session`: its `:config` and `:grants`.

  alias Ringbus.Server.Auth
  alias Ringbus.Wire.Frame

  ## Collecting
  #
  # The session hands its frames here while they are pushes to one channel.

  @doc """
  Starts or extends the run with a PUSH and the acked PUSHes that follow
  it to the same channel, the common case, taken in a loop of their own:
  `{frames left, run, acks}`.
  """
  def pushes([{:push, corr, mode, name, payload} | rest], s, run, acks) do
    {{^name, parts, payloads, count, bytes}, acks} =
      collect(s, run, name, {corr, mode, 1, payload}, acks)

    acked(rest, name, parts, payloads, count, bytes, s.config.max_payload_size, acks)
  end

  defp acked([{:push, corr, :ack, name, p} | rest], name, parts, ps, count, bytes, max, acks)
       when byte_size(p) <= max,
       do: acked(rest, name, [corr | parts], [p | ps], count + 1, bytes + byte_size(p), max, acks)

  defp acked(frames, name, parts, payloads, count, bytes, _max, acks),
    do: {frames, {name, parts, payloads, count, bytes}, acks}

  @doc "Adds a part to the run of channel `name`, storing the run before when it is another's."
  def collect(s, {name, parts, payloads, count, bytes}, name, part, acks),
    do: {add(part, s.config.max_payload_size, name, parts, payloads, count, bytes), acks}

  def collect(s, run, name, part, acks),
    do: {add(part, s.config.max_payload_size, name, [], [], 0, 0), store(s, run, acks)}

  @doc "Adds a PUSH or PUSH_BATCH part to the run of channel `name`."
  def add({corr, mode, 1, payload} = part, max, name, parts, payloads, count, bytes)
      when is_binary(payload) do
    cond do
      byte_size(payload) > max ->
        {name, [{corr, mode, :too_large} | parts], payloads, count, bytes}

      true ->
        part = if mode == :ack, do: corr, else: part
        {name, [part | parts], [payload | payloads], count + 1, bytes + byte_size(payload)}
    end
  end

  def add({corr, mode, n, list} = part, max, name, parts, payloads, count, bytes) do
    case payload_bytes(list, max, 0) do
      :too_large -> {name, [{corr, mode, :too_large} | parts], payloads, count, bytes}
      size -> {name, [part | parts], :lists.reverse(list, payloads), count + n, bytes + size}
    end
  end

  defp payload_bytes([p | _], max, _bytes) when byte_size(p) > max, do: :too_large
  defp payload_bytes([p | rest], max, bytes), do: payload_bytes(rest, max, bytes + byte_size(p))
  defp payload_bytes([], _max, bytes), do: bytes

  @doc "Stores a run (nil: none) and adds its acks to `acks`."
  def store(_session, nil, acks), do: acks

  def store(session, {name, parts, payloads, count, bytes}, acks) do
    parts = :lists.reverse(parts)

    cond do
      not Auth.allowed?(session.grants, :write, name) ->
        ack_error(parts, {:error, :forbidden}, acks)

      count == 0 ->
        one_by_one(session.config, name, parts, [], acks)

      true ->
        payloads = :lists.reverse(payloads)

        case auto_create(session.config, name, {:push_run, payloads, count, bytes}) do
          {:ok, first} -> ack_run(parts, first, acks)
          {:error, :no_channel} = error -> ack_error(parts, error, acks)
          {:error, _full_or_too_large} -> one_by_one(session.config, name, parts, payloads, acks)
        end
    end
  end

  @doc "Stores a tagged push alone: its result."
  def tagged(session, name, tag, payloads) do
    cond do
      not Auth.allowed?(session.grants, :write, name) ->
        {:error, :forbidden}

      payload_bytes(payloads, session.config.max_payload_size, 0) == :too_large ->
        {:error, :too_large}

      true ->
        Ringbus.push(name, payloads, producer: tag, create: create(session.config))
    end
  end

  @doc """
  Stores a batch the decoder kept packed (`Ringbus.Wire.Entries`) alone,
  under `tag` or none: its result. It reaches the channel as it came, so
  its memory is its bytes, whatever its count.
  """
  def packed(session, name, tag, %{count: count, bytes: bytes, largest: largest} = entries) do
    cond do
      not Auth.allowed?(session.grants, :write, name) ->
        {:error, :forbidden}

      largest > session.config.max_payload_size ->
        {:error, :too_large}

      true ->
        auto_create(session.config, name, {:push_tagged, tag, entries, count, bytes})
    end
  end

  # A missing channel is created when the server creates them on their first
  # push (`Ringbus.run/3`'s `:create`).
  defp auto_create(config, name, push), do: Ringbus.run(name, push, create: create(config))

  defp create(%{auto_create: false}), do: nil
  defp create(%{auto_create: opts}), do: opts

  defp ack_run([corr | rest], seq, acks) when is_integer(corr),
    do: ack_run(rest, seq + 1, [{corr, {:ok, seq}} | acks])

  defp ack_run([{corr, mode, :too_large} | rest], seq, acks),
    do: ack_run(rest, seq, ack(mode, corr, {:error, :too_large}, acks))

  defp ack_run([{corr, mode, n, _} | rest], seq, acks),
    do: ack_run(rest, seq + n, ack(mode, corr, {:ok, seq}, acks))

  defp ack_run([], _seq, acks), do: acks

  # Each frame on its own, whole or not at all, each refusal counted. The
  # run's payloads, in order, hold those of the acked PUSHes that fit.
  defp one_by_one(config, name, parts, payloads, acks) do
    batches = batches(parts, payloads, [])

    case auto_create(config, name, {:push_batches, batches}) do
      {:ok, results} -> ack_results(parts, results, acks)
      error -> ack_error(parts, error, acks)
    end
  end

  defp batches([corr | parts], [p | payloads], acc) when is_integer(corr),
    do: batches(parts, payloads, [{[p], 1, byte_size(p)} | acc])

  defp batches([{_, _, :too_large} | parts], payloads, acc), do: batches(parts, payloads, acc)

  defp batches([{_, _, 1, p} | parts], [p | payloads], acc) when is_binary(p),
    do: batches(parts, payloads, [{[p], 1, byte_size(p)} | acc])

  defp batches([{_, _, n, list} | parts], payloads, acc),
    do:
      batches(parts, Enum.drop(payloads, n), [{list, n, payload_bytes(list, :infinity, 0)} | acc])

  defp batches([], _payloads, acc), do: :lists.reverse(acc)

  defp ack_results([corr | rest], [result | results], acks) when is_integer(corr),
    do: ack_results(rest, results, [{corr, result} | acks])

  defp ack_results([{corr, mode, :too_large} | rest], results, acks),
    do: ack_results(rest, results, ack(mode, corr, {:error, :too_large}, acks))

  defp ack_results([{corr, mode, _, _} | rest], [result | results], acks),
    do: ack_results(rest, results, ack(mode, corr, result, acks))

  defp ack_results([], [], acks), do: acks

  defp ack_error([corr | rest], error, acks) when is_integer(corr),
    do: ack_error(rest, error, [{corr, error} | acks])

  defp ack_error([part | rest], error, acks),
    do: ack_error(rest, error, ack(elem(part, 1), elem(part, 0), error, acks))

  defp ack_error([], _error, acks), do: acks

  @doc "Adds a push's ack, unless it was sent in no-ack mode."
  def ack(:no_ack, _corr, _result, acks), do: acks
  def ack(:ack, corr, result, acks), do: [{corr, result} | acks]

  @doc "The acks of one read (in reverse) as PUSH_ACKS frames in order, each within `max_frame_size`."
  def push_acks(_config, []), do: []

  def push_acks(config, acks) do
    split_acks(acks, Frame.max_push_acks(config.max_frame_size), 0, [], [])
  end

  # Walks the reversed acks once, cutting a frame every `per_frame` entries;
  # the frames come out in order.
  defp split_acks([], _per, n, entries, frames), do: [{:push_acks, n, entries} | frames]

  defp split_acks(acks, per, per, entries, frames),
    do: split_acks(acks, per, 0, [], [{:push_acks, per, entries} | frames])

  defp split_acks([ack | rest], per, n, entries, frames),
    do: split_acks(rest, per, n + 1, [ack | entries], frames)
end

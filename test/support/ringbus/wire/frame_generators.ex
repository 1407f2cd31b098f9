defmodule Ringbus.Wire.FrameGenerators do
  @moduledoc false
  # PropEr generators of valid frames of every type, for the codec properties.

  alias Ringbus.Wire.{ErrorCode, Frame}

  def frame do
    :proper_types.oneof([request(), response()])
  end

  def request do
    :proper_types.oneof([
      hello(),
      let(
        {u32(), name(), u32(), overflow(), max_bytes(), replicas()},
        &Tuple.insert_at(&1, 0, :create)
      ),
      let({u32(), name()}, fn {corr, name} -> {:delete, corr, name} end),
      let({u32(), ack_mode(), name(), payload()}, &Tuple.insert_at(&1, 0, :push)),
      let({u32(), ack_mode(), name(), :proper_types.list(payload())}, fn {corr, mode, name, ps} ->
        {:push_batch, corr, mode, name, length(ps), ps}
      end),
      let({u32(), ack_mode(), name(), {name(), u64()}, payload()}, fn frame ->
        Tuple.insert_at(frame, 0, :tagged_push)
      end),
      let(
        {u32(), ack_mode(), name(), {name(), u64()}, :proper_types.list(payload())},
        fn {corr, mode, name, tag, ps} ->
          {:tagged_push_batch, corr, mode, name, tag, length(ps), ps}
        end
      ),
      let({u32(), name()}, fn {corr, name} -> {:pull, corr, name} end),
      let({u32(), name(), u64(), u32()}, &Tuple.insert_at(&1, 0, :read)),
      let({u32(), name(), u64(), u32(), u64()}, &Tuple.insert_at(&1, 0, :read)),
      let({u32(), name()}, fn {corr, name} -> {:len, corr, name} end),
      let({u32(), name()}, fn {corr, name} -> {:info, corr, name} end),
      let({u32(), name(), from(), u32(), u32()}, &Tuple.insert_at(&1, 0, :subscribe)),
      let({u32(), name(), from(), u32(), u32(), u64()}, &Tuple.insert_at(&1, 0, :subscribe)),
      # Version 6's forms: a READ or SUBSCRIBE with neither a time nor the
      # times flag is the older form.
      let(
        {u32(), name(), u32(), overflow(), max_bytes(), replicas(), max_bytes()},
        &Tuple.insert_at(&1, 0, :create)
      ),
      let(
        {u32(), name(), u64(), u32(), nil_or(u64()), :proper_types.boolean(),
         :proper_types.boolean()},
        fn {corr, name, from, max, inc, time?, times?} ->
          from = if time?, do: {:time, from}, else: from
          {:read, corr, name, from, max, inc, times? or not time?}
        end
      ),
      let(
        {u32(), name(), :proper_types.oneof([from(), {:time, u64()}]), u32(), u32(),
         nil_or(u64()), :proper_types.boolean()},
        fn {corr, name, from, credit, max_batch, inc, times?} ->
          times? = times? or not match?({:time, _}, from)
          {:subscribe, corr, name, from, credit, max_batch, inc, times?}
        end
      ),
      let({u32(), u32(), u32()}, &Tuple.insert_at(&1, 0, :credit)),
      let({u32(), u32()}, &Tuple.insert_at(&1, 0, :unsubscribe)),
      let(u32(), &{:ping, &1})
      | group_requests()
    ])
  end

  # Version 5's consumer-group requests.
  defp group_requests do
    seqs = :proper_types.list(u64())

    [
      let(
        {u32(), name(), id(), :proper_types.oneof([from(), {:time, u64()}]), positive(),
         max_deliver(), u32(), nil_or(name())},
        &Tuple.insert_at(&1, 0, :group_create)
      ),
      let({u32(), name(), id(), id(), u32(), u32()}, &Tuple.insert_at(&1, 0, :group_fetch)),
      let({u32(), name(), id(), id(), u32(), u32()}, &Tuple.insert_at(&1, 0, :group_fetch_timed)),
      let({u32(), name(), id(), seqs}, fn {corr, ch, g, ss} ->
        {:group_ack, corr, ch, g, length(ss), ss}
      end),
      let({u32(), name(), id(), u32(), seqs}, fn {corr, ch, g, delay, ss} ->
        {:group_nack, corr, ch, g, delay, length(ss), ss}
      end),
      let({u32(), name(), id(), seqs}, fn {corr, ch, g, ss} ->
        {:group_in_progress, corr, ch, g, length(ss), ss}
      end),
      let({u32(), name(), id(), id(), seqs}, fn {corr, ch, g, c, ss} ->
        {:group_claim, corr, ch, g, c, length(ss), ss}
      end),
      let({u32(), name(), id(), id(), u32(), u32()}, &Tuple.insert_at(&1, 0, :group_autoclaim)),
      let({u32(), name(), id(), id()}, &Tuple.insert_at(&1, 0, :group_remove_consumer)),
      let({u32(), name(), id()}, &Tuple.insert_at(&1, 0, :group_delete)),
      let({u32(), name()}, &Tuple.insert_at(&1, 0, :group_info)),
      let(
        {u32(), name(), id(), id(), u32(), u32(), :proper_types.boolean()},
        &Tuple.insert_at(&1, 0, :group_subscribe)
      )
    ]
  end

  defp group_responses do
    # Small payloads: the large ones are READ_OK's and DELIVER's to test, and
    # the decoder's split property cuts every byte of them.
    group_messages = :proper_types.list({u64(), :proper_types.binary(), u32()})

    [
      let({u32(), :proper_types.boolean(), group_messages}, fn {corr, more, ms} ->
        {:group_messages, corr, more, length(ms), ms}
      end),
      let({u32(), :proper_types.boolean(), timed_group_messages()}, fn {corr, more, ms} ->
        {:group_messages, corr, more, length(ms), ms}
      end),
      let({u32(), group_messages}, fn {sub, ms} -> {:group_deliver, sub, length(ms), ms} end),
      let(
        {u32(),
         :proper_types.non_empty(
           :proper_types.list({u64(), :proper_types.binary(), u32(), u64()})
         )},
        fn {sub, ms} -> {:group_deliver, sub, length(ms), ms} end
      ),
      let({u32(), u64()}, &Tuple.insert_at(&1, 0, :group_count)),
      let(
        {u32(), :proper_types.resize(4, :proper_types.list(group_info()))},
        &Tuple.insert_at(&1, 0, :group_info_ok)
      )
    ]
  end

  defp group_info do
    counts = List.to_tuple(for _ <- 1..8, do: u64())
    config = {positive(), max_deliver(), u32(), nil_or(name())}
    consumer = {id(), u64(), u64()}
    # 2^64 - 1 is how -1 (none delivered) travels.
    delivered = :proper_types.oneof([-1, :proper_types.integer(0, 0xFFFF_FFFF_FFFF_FFFE)])

    let(
      {id(), delivered, counts, config, :proper_types.resize(4, :proper_types.list(consumer))},
      fn {name, delivered, counts, {ack_wait, max_deliver, max_pending, dl}, consumers} ->
        {pending, lag, redelivered, acked, dead, lost, dropped, held} = counts

        %{
          name: name,
          delivered: delivered,
          pending: pending,
          lag: lag,
          redelivered: redelivered,
          acked: acked,
          dead: dead,
          lost: lost,
          dropped: dropped,
          held: held,
          config: %{
            ack_wait: ack_wait,
            max_deliver: max_deliver,
            max_pending: max_pending,
            dead_letter: dl
          },
          consumers: for({c, p, idle} <- consumers, do: %{name: c, pending: p, idle_ms: idle})
        }
      end
    )
  end

  # A group or consumer name: 1 to 65,535 bytes; longer than a channel's
  # now and then (the longest would make the decoder's split property slow).
  defp id do
    :proper_types.frequency([{20, name()}, {1, let(:proper_types.integer(256, 600), &big_id/1)}])
  end

  defp big_id(size), do: :binary.copy("g", size)

  defp positive, do: :proper_types.integer(1, 0xFFFF_FFFF)
  defp max_deliver, do: :proper_types.oneof([:infinity, positive()])
  defp nil_or(type), do: :proper_types.oneof([nil, type])

  def response do
    :proper_types.oneof([
      hello_ok(),
      let(u32(), &{:ok, &1}),
      let(:proper_types.list({u32(), ack_result()}), &{:push_acks, length(&1), &1}),
      let({u32(), u64(), payload()}, &Tuple.insert_at(&1, 0, :pull_ok)),
      let(u32(), &{:empty, &1}),
      let({u32(), u64(), u64(), messages()}, fn {corr, inc, lost, ms} ->
        {:read_ok, corr, inc, lost, length(ms), ms}
      end),
      let({u32(), u64()}, &Tuple.insert_at(&1, 0, :len_ok)),
      info_ok(),
      let({u32(), u32(), u64()}, &Tuple.insert_at(&1, 0, :subscribed)),
      let({u32(), u64(), messages()}, fn {sub, lost, ms} ->
        {:deliver, sub, lost, length(ms), ms}
      end),
      let({u32(), u64(), u64(), timed_messages()}, fn {corr, inc, lost, ms} ->
        {:read_timed_ok, corr, inc, lost, length(ms), ms}
      end),
      let({u32(), u64(), timed_messages()}, fn {sub, lost, ms} ->
        {:deliver_timed, sub, lost, length(ms), ms}
      end),
      info_ok_v6(),
      let({u32(), error_reason()}, &Tuple.insert_at(&1, 0, :sub_closed)),
      let(u32(), &{:pong, &1}),
      let({u32(), error_reason(), :proper_types.binary()}, &Tuple.insert_at(&1, 0, :error))
      | group_responses()
    ])
  end

  defp hello do
    token = :proper_types.oneof([nil, :proper_types.non_empty(:proper_types.binary())])
    let({u32(), u16(), u16(), token}, &Tuple.insert_at(&1, 0, :hello))
  end

  defp hello_ok do
    idle = :proper_types.oneof([:infinity, :proper_types.integer(1, 0xFFFF_FFFF)])

    let({u32(), u16(), u32(), u32(), u32(), u32(), idle}, fn {corr, v, mf, mp, ms, mc, idle} ->
      limits = %{
        max_frame_size: mf,
        max_payload_size: mp,
        max_subscriptions: ms,
        max_credit: mc,
        idle_timeout: idle
      }

      {:hello_ok, corr, v, limits}
    end)
  end

  defp info_ok do
    counters = List.to_tuple(for _ <- 1..11, do: u64())

    let({u32(), u32(), overflow(), max_bytes(), counters}, fn {corr, cap, ov, max, counters} ->
      {len, first, next, pushed, pulled, overwritten, rejected, skipped, bytes, bytes_pushed,
       incarnation} = counters

      {:info_ok, corr,
       %{
         capacity: cap,
         overflow: ov,
         max_bytes: max,
         len: len,
         first_seq: first,
         next_seq: next,
         pushed: pushed,
         pulled: pulled,
         overwritten: overwritten,
         rejected: rejected,
         skipped: skipped,
         bytes: bytes,
         bytes_pushed: bytes_pushed,
         incarnation: incarnation
       }}
    end)
  end

  # Version 6's INFO_OK: version 4's fields, then the times, max_age and expired.
  defp info_ok_v6 do
    tail = {replicas(), u16(), max_bytes(), max_bytes(), max_bytes(), u64()}

    let({info_ok(), tail}, fn {{:info_ok, corr, info}, {r, nodes, oldest, newest, age, exp}} ->
      times = %{oldest_time: oldest, newest_time: newest, max_age: age, expired: exp}
      {:info_ok, corr, Map.merge(info, Map.put(times, :replicas, r)) |> Map.put(:nodes, nodes)}
    end)
  end

  def u16, do: :proper_types.integer(0, 0xFFFF)

  # Small values, any value, and the edges of the range.
  def u32 do
    :proper_types.oneof([
      :proper_types.integer(0, 300),
      :proper_types.integer(0, 0xFFFF_FFFF),
      :proper_types.elements([0, 1, 0xFFFF, 0x1_0000, 0xFFFF_FFFE, 0xFFFF_FFFF])
    ])
  end

  def u64 do
    :proper_types.oneof([
      :proper_types.integer(0, 300),
      :proper_types.integer(0, 0xFFFF_FFFF_FFFF_FFFF),
      :proper_types.elements([
        0,
        1,
        0xFFFF_FFFF,
        0x1_0000_0000,
        0xFFFF_FFFF_FFFF_FFFE,
        0xFFFF_FFFF_FFFF_FFFF
      ])
    ])
  end

  # nil is sent as 0.
  defp replicas,
    do:
      :proper_types.oneof([nil, :proper_types.integer(1, 255), :proper_types.elements([1, 255])])

  defp max_bytes do
    :proper_types.oneof([
      nil,
      :proper_types.integer(1, 0xFFFF_FFFF_FFFF_FFFF),
      :proper_types.elements([1, 0xFFFF_FFFF_FFFF_FFFF])
    ])
  end

  def name do
    :proper_types.oneof([
      :proper_types.non_empty(:proper_types.binary()),
      let(:proper_types.integer(1, 255), &:proper_types.binary/1)
    ])
  end

  # Any small payload, and the sizes that test the edges: empty, two bytes,
  # a few KB, 64 KiB.
  def payload do
    :proper_types.frequency([
      {6, :proper_types.binary()},
      {1, :proper_types.elements([<<>>, <<0, 255>>])},
      {1, let(:proper_types.integer(0, 3000), &:proper_types.binary/1)},
      {1, let({:proper_types.byte(), :proper_types.elements([65_535, 65_536])}, &big/1)}
    ])
  end

  # Made from one random byte: PropEr would build a random binary that long
  # byte by byte.
  defp big({byte, size}), do: :binary.copy(<<byte>>, size)

  defp messages, do: :proper_types.list({u64(), payload()})
  defp timed_messages, do: :proper_types.list({u64(), payload(), u64()})

  defp timed_group_messages,
    do: :proper_types.non_empty(:proper_types.list({u64(), payload(), u32(), u64()}))

  defp ack_mode, do: :proper_types.elements([:ack, :no_ack])
  defp overflow, do: :proper_types.elements([:drop_oldest, :reject])

  defp from, do: :proper_types.oneof([:earliest, :latest, u64()])

  defp ack_result do
    :proper_types.oneof([let(u64(), &{:ok, &1}), let(error_reason(), &{:error, &1})])
  end

  # Known codes decode to atoms; unknown ones stay integers.
  def error_reason do
    known = for {reason, _code, _text} <- ErrorCode.all(), do: reason
    :proper_types.oneof([:proper_types.elements(known), :proper_types.integer(1000, 0xFFFF)])
  end

  defp let(raw, fun), do: :proper_types.bind(raw, fun, false)

  @doc """
  `:proper.forall/2`, with exceptions turned into failures: the PropEr of
  Debian calls `erlang:get_stacktrace/0`, which OTP 23 removed, when a
  property raises.
  """
  def forall(generator, property) do
    :proper.forall(generator, fn value ->
      try do
        property.(value)
      rescue
        exception ->
          IO.puts(Exception.format(:error, exception, __STACKTRACE__))
          false
      end
    end)
  end

  @doc "Runs a property; true, or the counterexample when it fails."
  def check(property, numtests) do
    case :proper.quickcheck(property, [:quiet, numtests: numtests]) do
      true -> true
      _ -> {:counterexample, :proper.counterexample()}
    end
  end

  @doc "The bytes of a list of frames, as one binary."
  def bytes(frames), do: IO.iodata_to_binary(Enum.map(frames, &Frame.encode/1))
end

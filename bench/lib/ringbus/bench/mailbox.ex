defmodule Ringbus.Bench.Mailbox do
  @moduledoc """
  A bounded local copy of the calling process's mailbox, so that a selective
  receive done under a backlog scans only what arrived since the last drain.

  ## The rule

  A plain `receive` that takes whatever comes first costs the same however
  many messages wait. A *selective* receive - one whose patterns may skip
  messages - scans the mailbox from the front until something matches, so it
  costs one step per waiting message. A process that does one selective
  receive per message it handles, while N messages wait, does O(N²) work and
  may never catch up.

  Such receives hide inside library calls. On OTP 25 a `:gen_udp.send/4` or
  `:gen_tcp.send/2` on the default `inet` backend sends the packet to a port
  and then waits for `{:inet_reply, socket, result}` with a selective receive.
  `GenServer.call/3` also waits selectively, but the VM skips the messages that
  were there before its monitor reference was made, so it does not scan the
  backlog; a receive of your own that matches on an older reference, or on no
  reference at all, does.

  ## The cure

  RabbitMQ's `gen_server2` answers this by moving the whole mailbox into a
  queue on the process heap before it handles each message, so that the
  receives done while handling it find an almost empty mailbox. This module
  does the same for a process that owns its receive loop, without replacing
  `gen_server`: call `drain/1` before anything that receives selectively, and
  take the next message to handle with `next/1`, which serves the buffer first
  and the mailbox after it. Every message in the buffer arrived before every
  message left in the mailbox, so the order of arrival is kept.

  The buffer is bounded by `:max_len`. When it is full, `drain/1` stops and
  leaves the rest in the mailbox; each such stop is counted in `:stops`, and
  `full?/1` says so. Nothing is ever dropped: a full buffer only means the
  selective receives scan the messages left behind, as they would without it.

  The buffer carries its length; nothing here counts a list.

  ## Example

  A process that writes each message it gets to a UDP socket:

      def loop(mailbox, socket) do
        case Ringbus.Bench.Mailbox.next(mailbox, :infinity) do
          {:ok, {:log, line}, mailbox} ->
            # The send below waits for the port's reply with a selective receive.
            mailbox = Ringbus.Bench.Mailbox.drain(mailbox)
            :ok = :gen_udp.send(socket, {127, 0, 0, 1}, 514, line)
            loop(mailbox, socket)

          {:ok, _other, mailbox} ->
            loop(mailbox, socket)
        end
      end

      loop(Ringbus.Bench.Mailbox.new(max_len: 100_000), socket)

  A selective receive of your own goes through `receive_match/3`, which looks
  in the buffer before it waits on the mailbox:

      require Ringbus.Bench.Mailbox

      {:ok, reply, mailbox} =
        Ringbus.Bench.Mailbox.receive_match(mailbox, 5_000) do
          {:reply, ^tag, reply} -> reply
        end

  ## What it is not for

  A `GenServer` must not drain its own mailbox: system messages
  (`:sys.suspend/1`, code change) and `GenServer.call/3` requests would sit in
  the buffer where its loop never looks. Use it in a process whose loop hands
  every message, including `{:system, from, request}`, to the right place.
  """

  @enforce_keys [:max_len]
  defstruct queue: :queue.new(), len: 0, max_len: nil, stops: 0

  @typedoc """
  A mailbox buffer:

    * `:len` - the messages it holds
    * `:max_len` - the messages it holds at most
    * `:stops` - how many times `drain/1` stopped at `:max_len` with messages
      left in the process mailbox
  """
  @type t :: %__MODULE__{
          queue: :queue.queue(term()),
          len: non_neg_integer(),
          max_len: pos_integer(),
          stops: non_neg_integer()
        }

  @typedoc """
  Options for `new/1`:

    * `:max_len` - the most messages the buffer holds, a positive integer.
      Defaults to `100_000`.
  """
  @type options :: [max_len: pos_integer()]

  @doc """
  Returns an empty buffer.

      iex> Ringbus.Bench.Mailbox.new(max_len: 10).max_len
      10
  """
  @spec new(options()) :: t()
  def new(opts \\ []) do
    opts = Keyword.validate!(opts, max_len: 100_000)

    case opts[:max_len] do
      n when is_integer(n) and n > 0 ->
        %__MODULE__{max_len: n}

      other ->
        raise ArgumentError, "expected :max_len to be a positive integer, got: #{inspect(other)}"
    end
  end

  @doc """
  Moves the messages waiting in the process mailbox to the end of the buffer,
  until the mailbox is empty or the buffer is full. Never waits.

  When it stops because the buffer is full and messages are left in the
  mailbox, it adds one to `:stops`.
  """
  @spec drain(t()) :: t()
  def drain(%__MODULE__{len: len, max_len: max} = mailbox) when len >= max do
    case Process.info(self(), :message_queue_len) do
      {:message_queue_len, 0} -> mailbox
      {:message_queue_len, _} -> %{mailbox | stops: mailbox.stops + 1}
    end
  end

  def drain(%__MODULE__{queue: queue, len: len} = mailbox) do
    receive do
      message -> drain(%{mailbox | queue: :queue.in(message, queue), len: len + 1})
    after
      0 -> mailbox
    end
  end

  @doc """
  Takes the oldest message: the front of the buffer, or when it is empty the
  front of the process mailbox. Returns `:empty` when both are empty.
  """
  @spec next(t()) :: {:ok, term(), t()} | :empty
  def next(mailbox) do
    case next(mailbox, 0) do
      {:ok, _message, _mailbox} = ok -> ok
      {:timeout, _mailbox} -> :empty
    end
  end

  @doc """
  Like `next/1`, but when the buffer and the mailbox are both empty waits up to
  `timeout` milliseconds (or `:infinity`) for a message.
  """
  @spec next(t(), timeout()) :: {:ok, term(), t()} | {:timeout, t()}
  def next(%__MODULE__{len: 0} = mailbox, timeout) do
    receive do
      message -> {:ok, message, mailbox}
    after
      timeout -> {:timeout, mailbox}
    end
  end

  def next(%__MODULE__{queue: queue, len: len} = mailbox, _timeout) do
    {{:value, message}, queue} = :queue.out(queue)
    {:ok, message, %{mailbox | queue: queue, len: len - 1}}
  end

  @doc "The number of messages in the buffer. Constant time."
  @spec len(t()) :: non_neg_integer()
  def len(%__MODULE__{len: len}), do: len

  @doc "Whether the buffer holds `:max_len` messages."
  @spec full?(t()) :: boolean()
  def full?(%__MODULE__{len: len, max_len: max}), do: len >= max

  @doc """
  A selective receive that keeps the order of arrival: the first message,
  oldest first, that matches one of the clauses, whether it sits in the buffer
  or in the process mailbox.

  It drains the mailbox first, then looks through the buffer, then waits on the
  mailbox with a real `receive`, which scans only the messages that came after
  the drain (and those a full buffer left behind). Messages that do not match
  stay where they are. The clauses take patterns and guards as in `receive`.

  Returns `{:ok, value, mailbox}`, where `value` is what the matching clause
  returned, or `{:timeout, mailbox}` when nothing matched within `timeout`
  milliseconds (or `:infinity`), counted from the call.

  Looking through the buffer costs one step per buffered message. When the
  awaited message cannot be in the buffer - a reply to a request sent after
  the last drain - a plain `receive` after `drain/1` skips that cost.

      iex> require Ringbus.Bench.Mailbox
      iex> send(self(), {:other, 1})
      iex> send(self(), {:reply, 2})
      iex> mailbox = Ringbus.Bench.Mailbox.drain(Ringbus.Bench.Mailbox.new())
      iex> {:ok, 2, mailbox} =
      ...>   Ringbus.Bench.Mailbox.receive_match(mailbox, 100) do
      ...>     {:reply, n} -> n
      ...>   end
      iex> {:ok, message, _mailbox} = Ringbus.Bench.Mailbox.next(mailbox)
      iex> message
      {:other, 1}
  """
  defmacro receive_match(mailbox, timeout, do: clauses) do
    matched = for {:->, meta, [head, body]} <- clauses, do: {:->, meta, [head, {:ok, body}]}
    catch_all = quote(do: (_ -> :nomatch))
    finder = {:fn, [], matched ++ catch_all}
    mb = Macro.var(:drained, __MODULE__)

    received =
      for {:->, meta, [head, body]} <- clauses do
        {:->, meta, [head, quote(do: {:ok, unquote(body), unquote(mb)})]}
      end

    quote do
      deadline = Ringbus.Bench.Mailbox.__deadline__(unquote(timeout))
      unquote(mb) = Ringbus.Bench.Mailbox.drain(unquote(mailbox))

      case Ringbus.Bench.Mailbox.__take_first__(unquote(mb), unquote(finder)) do
        {:ok, _value, _mailbox} = found ->
          found

        :nomatch ->
          receive do
            unquote(received)
          after
            Ringbus.Bench.Mailbox.__remaining__(deadline) -> {:timeout, unquote(mb)}
          end
      end
    end
  end

  @doc false
  @spec __deadline__(timeout()) :: integer() | :infinity
  def __deadline__(:infinity), do: :infinity

  def __deadline__(timeout) when is_integer(timeout) and timeout >= 0,
    do: System.monotonic_time(:millisecond) + timeout

  def __deadline__(other),
    do:
      raise(
        ArgumentError,
        "expected timeout to be :infinity or a non-negative integer, got: #{inspect(other)}"
      )

  @doc false
  @spec __remaining__(integer() | :infinity) :: timeout()
  def __remaining__(:infinity), do: :infinity
  def __remaining__(deadline), do: max(deadline - System.monotonic_time(:millisecond), 0)

  @doc false
  # Takes the first buffered message for which `finder` returns `{:ok, value}`.
  @spec __take_first__(t(), (term() -> {:ok, term()} | :nomatch)) ::
          {:ok, term(), t()} | :nomatch
  def __take_first__(%__MODULE__{len: 0}, _finder), do: :nomatch

  def __take_first__(%__MODULE__{queue: queue, len: len} = mailbox, finder) do
    case take_first(:queue.to_list(queue), finder, []) do
      {:ok, value, rest} -> {:ok, value, %{mailbox | queue: :queue.from_list(rest), len: len - 1}}
      :nomatch -> :nomatch
    end
  end

  defp take_first([message | rest], finder, seen) do
    case finder.(message) do
      {:ok, value} -> {:ok, value, :lists.reverse(seen, rest)}
      :nomatch -> take_first(rest, finder, [message | seen])
    end
  end

  defp take_first([], _finder, _seen), do: :nomatch
end

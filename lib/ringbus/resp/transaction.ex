defmodule Ringbus.Resp.Transaction do
  @moduledoc false
  # The commands a client queues between MULTI and EXEC, as data, and the
  # handlers of MULTI, EXEC, DISCARD, WATCH and UNWATCH. Pure:
  # `Ringbus.Resp.Session` checks each command as Redis does before it
  # queues it (unknown, wrong arity, no permission: the transaction is then
  # aborted, and EXEC answers -EXECABORT), and runs the queue when EXEC's
  # handler returns `{:exec, t, session}`.
  #
  # The queue is bounded: at most @max_commands commands, and at most the
  # server's `:max_frame_size` bytes of arguments, counted as the parser
  # counts a command's (32 bytes an argument beside its bytes). A command
  # past either bound aborts the transaction and frees the queue at once.

  alias Ringbus.Resp.Encoder

  @max_commands 100_000
  @arg_overhead 32

  defstruct commands: [], count: 0, bytes: 0, aborted: false

  @type t :: %__MODULE__{
          commands: [[binary()]],
          count: non_neg_integer(),
          bytes: non_neg_integer(),
          aborted: boolean()
        }

  @doc "The bound on queued commands, for the docs and the error."
  def max_commands, do: @max_commands

  @doc "An empty transaction (MULTI)."
  @spec new() :: t()
  def new, do: %__MODULE__{}

  @doc """
  Queues a checked command, or aborts the transaction when it would pass
  `max_bytes` or the count bound: `{:ok, t}` or `{:error, :too_many |
  :too_large, t}`, whose queue is then empty.
  """
  @spec add(t(), [binary()], pos_integer()) :: {:ok, t()} | {:error, atom(), t()}
  def add(%__MODULE__{aborted: true} = t, _command, _max_bytes), do: {:ok, t}

  def add(t, command, max_bytes) do
    bytes = t.bytes + Enum.reduce(command, 0, &(&2 + byte_size(&1) + @arg_overhead))

    cond do
      t.count >= @max_commands -> {:error, :too_many, abort(t)}
      bytes > max_bytes -> {:error, :too_large, abort(t)}
      true -> {:ok, %{t | commands: [command | t.commands], count: t.count + 1, bytes: bytes}}
    end
  end

  @doc "Marks the transaction failed: EXEC will discard it. Its queue is freed."
  @spec abort(t()) :: t()
  def abort(t), do: %{t | commands: [], count: 0, bytes: 0, aborted: true}

  @doc "The queued commands, in the order they came."
  @spec commands(t()) :: [[binary()]]
  def commands(t), do: :lists.reverse(t.commands)

  ## Commands

  def multi([], %{multi: nil} = s), do: {{:simple, "OK"}, %{s | multi: new()}}
  def multi([], s), do: {Encoder.error("ERR MULTI calls can not be nested"), s}

  def exec([], %{multi: nil} = s), do: {Encoder.error("ERR EXEC without MULTI"), s}

  def exec([], %{multi: %__MODULE__{aborted: true}} = s) do
    {Encoder.error("EXECABORT Transaction discarded because of previous errors."),
     %{s | multi: nil}}
  end

  # The session runs the queue: it alone runs commands.
  def exec([], %{multi: t} = s), do: {:exec, t, %{s | multi: nil}}

  def discard([], %{multi: nil} = s), do: {Encoder.error("ERR DISCARD without MULTI"), s}
  def discard([], s), do: {{:simple, "OK"}, %{s | multi: nil}}

  def watch(_keys, %{multi: nil} = s) do
    {Encoder.error(
       "ERR WATCH is not supported by Ringbus: EXEC runs its commands in order, not isolated from other clients'"
     ), s}
  end

  def watch(_keys, s), do: {Encoder.error("ERR WATCH inside MULTI is not allowed"), s}

  # Nothing is ever watched, so there is nothing to forget.
  def unwatch([], s), do: {{:simple, "OK"}, s}

  @doc "The reply to a queued command, or to the one that ends the transaction."
  def queue(command, s) do
    case add(s.multi, command, s.config.max_frame_size) do
      {:ok, t} ->
        {{:simple, "QUEUED"}, %{s | multi: t}}

      {:error, _bound, t} ->
        {Encoder.error([
           "ERR a transaction queues at most #{max_commands()} commands ",
           "and max_frame_size (#{s.config.max_frame_size}) bytes: this one is discarded"
         ]), %{s | multi: t}}
    end
  end

  @doc "The reply to an EXEC refused by the session's checks: the transaction ends."
  def exec_abort({:error, text}) do
    why = String.replace_prefix(text, "ERR ", "")
    Encoder.error(["EXECABORT Transaction discarded because of: ", why])
  end
end

defmodule Ringbus.Test.Producer do
  @moduledoc """
  A producer that pipelines async pushes through a `Ringbus.Client` until the
  connection ends, and keeps count of what it sent and what came back, for
  the tests that stop a server under it.
  """

  @doc """
  Starts a producer connected to `port`, pushing to `channel`, at most
  `max` pushes. It tells `parent` `{:producing, pid}` once `warm` acks have
  come, and `{:produced, result}` when the connection has ended, where
  `result` holds the correlation ids `sent`, every ack entry `answers` as
  `{corr, result}` in arrival order, and the `down` reason.
  """
  def start(port, channel, opts \\ []) do
    parent = self()
    max = Keyword.get(opts, :max, 2_000_000)
    warm = Keyword.get(opts, :warm, 1_000)

    spawn_link(fn ->
      {:ok, client} = Ringbus.Client.connect(port: port, max_pending: 5_000)
      state = %{client: client, sent: [], n: 0, answers: [], acked: 0, warm: warm, parent: parent}
      send(parent, {:produced, produce(state, channel, max)})
    end)
  end

  defp produce(state, channel, max) do
    state = if state.warm != nil and state.acked >= state.warm, do: warmed(state), else: state

    if state.n >= max do
      finish(state)
    else
      case Ringbus.Client.push_async(state.client, channel, "m#{state.n}") do
        {:ok, corr} ->
          produce(take(%{state | sent: [corr | state.sent], n: state.n + 1}, 0), channel, max)

        {:error, :backpressure} ->
          produce(take(state, 1_000), channel, max)

        {:error, :closed} ->
          finish(state)
      end
    end
  end

  defp warmed(state) do
    send(state.parent, {:producing, self()})
    %{state | warm: nil}
  end

  # Takes acks already here, waiting up to `timeout` ms for the first.
  defp take(state, timeout) do
    client = state.client

    receive do
      {:ringbus_acks, ^client, acks} ->
        take(%{state | answers: [acks | state.answers], acked: state.acked + length(acks)}, 0)
    after
      timeout -> state
    end
  end

  # After the last push: every ack, then the connection's end.
  defp finish(state) do
    client = state.client

    receive do
      {:ringbus_acks, ^client, acks} -> finish(%{state | answers: [acks | state.answers]})
      {:ringbus_down, ^client, reason} -> result(state, reason)
    after
      30_000 -> result(state, :no_down_message)
    end
  end

  defp result(state, reason) do
    %{
      sent: Enum.reverse(state.sent),
      answers: state.answers |> Enum.reverse() |> List.flatten(),
      down: reason
    }
  end
end

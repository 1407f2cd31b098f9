defmodule Ringbus.Bench.Replication.JetStreamAdmin do
  @moduledoc false
  # JetStream's API requests the benches make (`$JS.API.>`, through
  # `NatsClient.request/4`), each retried every 100 ms until a deadline:
  # right after start, or after a failover, JetStream may answer
  # "temporarily unavailable".

  alias Ringbus.Bench.Replication.{NatsClient, Samples}

  @doc """
  Makes the API request `subject` (`$JS.API.STREAM.CREATE.S`,
  `$JS.API.CONSUMER.DURABLE.CREATE.S.D`...) with `json` until it is
  answered without an error; raises past `deadline` (monotonic µs).
  """
  @spec create!(NatsClient.t(), binary(), binary(), integer()) :: :ok
  def create!(admin, subject, json, deadline) do
    case NatsClient.request(admin, subject, json, 5_000) do
      {:ok, reply} ->
        cond do
          not (reply =~ ~s("error")) -> :ok
          Samples.now() > deadline -> raise "JetStream refused #{subject}: #{reply}"
          true -> retry(fn -> create!(admin, subject, json, deadline) end)
        end

      {:error, reason} ->
        if Samples.now() > deadline,
          do: raise("JetStream did not answer: #{inspect(reason)}"),
          else: retry(fn -> create!(admin, subject, json, deadline) end)
    end
  end

  @doc "The name of the server that leads `stream`; raises past `deadline`."
  @spec leader!(NatsClient.t(), binary(), integer()) :: binary()
  def leader!(admin, stream, deadline) do
    with {:ok, reply} <- NatsClient.request(admin, "$JS.API.STREAM.INFO.#{stream}", "", 5_000),
         [_, leader] <- Regex.run(~r/"leader":"([^"]+)"/, reply) do
      leader
    else
      other ->
        if Samples.now() > deadline,
          do: raise("no leader for stream #{stream}: #{inspect(other)}"),
          else: retry(fn -> leader!(admin, stream, deadline) end)
    end
  end

  @doc "Waits 100 ms, then runs `fun`."
  @spec retry((() -> result)) :: result when result: term()
  def retry(fun) do
    receive after: (100 -> :ok)
    fun.()
  end
end

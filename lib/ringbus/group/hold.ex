defmodule Ringbus.Group.Hold do
  @moduledoc false
  # Holding groups (`hold: true`, `Ringbus.Groups.create/3`): work-queue
  # retention on a reject channel. A message leaves the ring only
  # once every holding group has acked it (or given it up dead): each
  # request on such a channel ends by publishing the groups' floor to the
  # channel (`Ringbus.Channel.Hold`), which a push that finds the ring full
  # frees up to. No push reads a group, and no floor is computed per push.
  #
  # A group's floor is the lowest seq it has not acked: its lowest pending
  # seq, else the one after its position. Its position is read before its
  # PEL, and a holding group's reads make their entries pending before its
  # position moves past them (`Ringbus.Group.Reads.advance/6`), so a seq
  # below the floor read is acked, or dead, for good: the floor computed
  # is never too high, at worst a little low, until the next request.
  #
  # A holding group made later starts no lower than the floor (what every
  # holding group acked is consumed, as JetStream's work queue deletes it),
  # and moves the floor's generation on, so that a floor computed without
  # it is refused.

  alias Ringbus.Channel.Hold
  alias Ringbus.Group.Table

  @doc """
  `:ok` when a group of `config` may be made on `at`'s channel: a holding
  group needs a channel that rejects.
  """
  def check(%{channel: channel}, config) do
    if Map.get(config, :hold, false) and channel.overflow != :reject,
      do: {:error, :hold_needs_reject_channel},
      else: :ok
  end

  @doc "Group `group`, of `config`, was made: counted, and started at the floor."
  def made(%{channel: channel, table: t, c: c}, group, config) do
    if Map.get(config, :hold, false) do
      Hold.hold(channel, 1)
      {:ok, floor} = Hold.raise_floor(channel, nil, nil)

      case Table.fetch(t, c, group) do
        {:ok, %{last: last}} when last + 1 < floor -> Table.set_last(t, c, group, floor - 1, nil)
        _ -> true
      end
    end

    :ok
  end

  @doc "Group `group`, of `config`, is gone: no longer counted."
  def gone(%{channel: channel}, config) do
    if Map.get(config, :hold, false), do: Hold.hold(channel, -1)
    :ok
  end

  @doc """
  The channel's groups were loaded from a snapshot: its holding groups are
  counted anew, and their floor published.
  """
  def loaded(%{channel: channel, table: t, c: c} = at) do
    holding = Enum.count(Table.groups(t, c), fn {_name, g} -> Map.get(g.config, :hold, false) end)
    Hold.put_holders(channel, holding)
    if holding > 0, do: Hold.raise_floor(channel, nil, nil)
    publish(at)
  end

  @doc "Publishes the floor of the channel's holding groups, if it has any."
  def publish(%{channel: channel, table: t, c: c}) do
    if Hold.held?(channel) do
      {gen, _floor} = Hold.generation(channel)

      floors =
        for {name, %{last: last, config: config}} <- Table.groups(t, c),
            Map.get(config, :hold, false) do
          case Table.pending_bounds(t, c, name) do
            {low, _high} -> min(low, last + 1)
            nil -> last + 1
          end
        end

      if floors != [], do: Hold.raise_floor(channel, gen, max(Enum.min(floors), 0))
    end

    :ok
  end
end

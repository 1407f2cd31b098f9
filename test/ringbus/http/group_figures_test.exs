defmodule Ringbus.HTTP.GroupFiguresTest do
  # The figures of a channel's consumer groups (Ringbus.Groups), per group
  # and per consumer, read over real HTTP from /metrics (checked by
  # promtool), /status, /status.json and /status.txt, and printed by
  # Ringbus.Release.stats/1; and the bounds of a scrape.
  use ExUnit.Case, async: false

  import ExUnit.CaptureIO

  alias Ringbus.Groups
  alias Ringbus.Test.Promtool

  setup do
    # A scrape's bounds count every channel's groups: none but this test's.
    Enum.each(Ringbus.channels(), &Ringbus.delete/1)
    http = start_supervised!({Ringbus.HTTP, port: 0, interval: 20})
    name = "group-figures-#{System.unique_integer([:positive])}"
    :ok = Ringbus.create(name, capacity: 6)
    on_exit(fn -> Ringbus.delete(name) end)
    %{url: "http://127.0.0.1:#{Ringbus.HTTP.port(http)}", name: name}
  end

  defp get(url) do
    {:ok, {{_, 200, _}, _headers, body}} =
      :httpc.request(:get, {String.to_charlist(url), []}, [], body_format: :binary)

    body
  end

  # Every sample of `family` for channel `name` and `rest` of its labels.
  defp metric(body, family, name, rest) do
    case Regex.run(~r/^#{family}\{channel="#{name}",#{rest}\} (\S+)$/m, body) do
      [_, value] -> value
      nil -> flunk("no #{family}{channel=#{name},#{rest}} in:\n#{body}")
    end
  end

  test "per group and per consumer: /metrics, /status, /status.json, /status.txt, Release.stats",
       %{url: url, name: name} do
    :ok = Groups.create(name, "work", from: :earliest, max_deliver: 2)
    :ok = Groups.create(name, "late", from: :earliest)
    {:ok, 0} = Ringbus.push_many(name, ~w(a b c d e f))

    {:ok, [{0, _, 1}, {1, _, 1}, {2, _, 1}]} = Groups.fetch(name, "work", "c1", 3)
    body = get(url <> "/metrics")
    # Fetched 3, none acked.
    assert metric(body, "ringbus_group_pending_messages", name, ~s(group="work")) == "3"
    assert metric(body, "ringbus_group_delivered_seq", name, ~s(group="work")) == "2"
    assert metric(body, "ringbus_group_acked_total", name, ~s(group="work")) == "0"

    assert metric(
             body,
             "ringbus_group_consumer_pending_messages",
             name,
             ~s(group="work",consumer="c1")
           ) ==
             "3"

    {:ok, 2} = Groups.ack(name, "work", [0, 1])
    {:ok, [{3, _, 1}, {4, _, 1}]} = Groups.fetch(name, "work", "c2", 2)
    # Nacked, fetched again by another consumer: one redelivery.
    {:ok, 1} = Groups.nack(name, "work", [3])
    {:ok, [{3, "d", 2}]} = Groups.fetch(name, "work", "c1", 1)
    # Nacked after max_deliver deliveries: dead (no dead-letter channel).
    {:ok, 1} = Groups.nack(name, "work", [3])
    {:ok, [{5, "f", 1}]} = Groups.fetch(name, "work", "c2", 1)
    # Two more overwrite seqs 0 and 1, which "late" never got to.
    {:ok, 6} = Ringbus.push_many(name, ~w(g h))

    body = get(url <> "/metrics")
    assert {"", 0} = Promtool.check(body)

    # Delivered through 5; pending 2 (c1) and 4, 5 (c2); 6 and 7 not yet.
    for {family, value} <- [
          {"ringbus_group_delivered_seq", "5"},
          {"ringbus_group_pending_messages", "3"},
          {"ringbus_group_lag_messages", "2"},
          {"ringbus_group_acked_total", "2"},
          {"ringbus_group_redelivered_total", "1"},
          {"ringbus_group_dead_total", "1"},
          {"ringbus_group_lost_total", "0"},
          {"ringbus_group_consumers", "2"}
        ],
        do: assert({family, metric(body, family, name, ~s(group="work"))} == {family, value})

    for {family, value} <- [
          {"ringbus_group_delivered_seq", "-1"},
          {"ringbus_group_lost_total", "2"},
          {"ringbus_group_lag_messages", "6"},
          {"ringbus_group_consumers", "0"}
        ],
        do: assert({family, metric(body, family, name, ~s(group="late"))} == {family, value})

    pending = "ringbus_group_consumer_pending_messages"
    assert metric(body, pending, name, ~s(group="work",consumer="c1")) == "1"
    assert metric(body, pending, name, ~s(group="work",consumer="c2")) == "2"

    idle =
      metric(body, "ringbus_group_consumer_idle_seconds", name, ~s(group="work",consumer="c1"))

    assert String.to_float(idle) >= 0 and String.to_float(idle) < 60
    assert body =~ ~r/^ringbus_group_omitted 0$/m
    assert body =~ ~r/^ringbus_group_consumers_omitted 0$/m

    html = get(url <> "/status")
    [groups] = Regex.run(~r{<table id="channel-groups">.*?</table>}s, html)
    cells = Enum.map_join(~w(5 3 2 2 1 1 0 0 2), &"<td>#{&1}</td>")
    assert groups =~ ~s(<td class="name">#{name}</td><td class="name">work</td>#{cells}</tr>)
    [consumers] = Regex.run(~r{<table id="group-consumers">.*?</table>}s, html)

    assert consumers =~
             ~r{<td class="name">#{name}</td><td class="name">work</td><td class="name">c2</td><td>2</td><td>[\d.]+ s</td>}

    json = get(url <> "/status.json")

    assert json =~
             ~s({"acked":2,"channel":"#{name}","consumers":2,"dead":1,"delivered":5,"group":"work","held":0,"lag":2,"lost":0,"pending":3,"redelivered":1})

    assert json =~
             ~r/\{"channel":"#{name}","consumer":"c1","group":"work","idle_ms":\d+,"pending":1\}/

    text = get(url <> "/status.txt")
    stats = capture_io(fn -> :ok = Ringbus.Release.stats(url: url) end)

    for out <- [text, stats] do
      assert out =~ ~r/^CHANNEL\s+GROUP\s+DELIVERED\s+PENDING\s+LAG\s+ACKED\s+REDELIVERED/m
      assert out =~ ~r/^#{name}\s+work\s+5\s+3\s+2\s+2\s+1\s+1\s+0\s+0\s+2$/m
      assert out =~ ~r/^#{name}\s+late\s+-1\s+0\s+6\s+0\s+0\s+0\s+2\s+0\s+0$/m
      assert out =~ ~r/^#{name}\s+work\s+c2\s+2\s+[\d.]+ s$/m
    end
  end

  test "a scrape shows at most max_groups groups and max_consumers consumers, and counts the rest",
       %{name: name} do
    http = start_supervised!({Ringbus.HTTP, port: 0, max_groups: 2, max_consumers: 1}, id: :bound)
    url = "http://127.0.0.1:#{Ringbus.HTTP.port(http)}"

    for group <- ~w(a b c), do: :ok = Groups.create(name, group, from: :earliest)
    {:ok, 0} = Ringbus.push_many(name, ~w(x y z))
    # By group, then consumer name: a's c1 is shown; a's c2, b's c1, c's c1 are not.
    for {group, consumer} <- [{"a", "c1"}, {"a", "c2"}, {"b", "c1"}, {"c", "c1"}],
        do: {:ok, [_]} = Groups.fetch(name, group, consumer, 1)

    body = get(url <> "/metrics")
    assert {"", 0} = Promtool.check(body)
    assert metric(body, "ringbus_group_consumers", name, ~s(group="a")) == "2"
    assert metric(body, "ringbus_group_consumers", name, ~s(group="b")) == "1"
    assert metric(body, "ringbus_group_pending_messages", name, ~s(group="a")) == "2"
    refute body =~ ~s(channel="#{name}",group="c")

    consumers =
      Regex.scan(~r/^ringbus_group_consumer_pending_messages\{(.*)\} (\d+)$/m, body,
        capture: :all_but_first
      )

    assert consumers == [[~s(channel="#{name}",group="a",consumer="c1"), "1"]]
    assert body =~ ~r/^ringbus_group_omitted 1$/m
    assert body =~ ~r/^ringbus_group_consumers_omitted 3$/m

    html = get(url <> "/status")
    assert html =~ "Past the page's bounds: 1 groups and 3 consumers not shown."
    text = get(url <> "/status.txt")
    assert text =~ "Past the bounds: 1 groups and 3 consumers not shown."
  end
end

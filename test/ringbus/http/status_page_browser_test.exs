defmodule Ringbus.HTTP.StatusPageBrowserTest do
  # /status as a browser shows it: headless Chromium (Debian's chromium)
  # renders the page, and both its DOM and its pixels are looked at. It
  # runs beside the other tests, whose channels may show up on the page too.
  use ExUnit.Case, async: true

  alias Ringbus.Test.Browser

  @size {1280, 900}
  @long "orders.eu-west-1.payments-settled.v2.partition-0017.replica-b"

  setup do
    server = start_supervised!({Ringbus.Server, port: 0})
    http = start_supervised!({Ringbus.HTTP, port: 0, interval: 50})

    on_exit(fn ->
      Enum.each(["browser-events", "browser-jobs", @long, @long <> "-raft"], &Ringbus.delete/1)
    end)

    %{server: server, url: "http://127.0.0.1:#{Ringbus.HTTP.port(http)}/status"}
  end

  test "the page renders its channel table with values and its sparklines", %{url: url} do
    :ok = Ringbus.create("browser-events", capacity: 100, max_bytes: 1024)
    :ok = Ringbus.create("browser-jobs", capacity: 10, overflow: :reject)
    {:ok, _} = Ringbus.push_many("browser-events", ~w(a b c))
    {:ok, _} = Ringbus.push_many("browser-jobs", List.duplicate("j", 10))
    {:error, :full} = Ringbus.push("browser-jobs", "j")
    {:ok, sub} = Ringbus.subscribe("browser-events", from: :earliest, max_credit: 1)
    assert_receive {:ringbus, ^sub, _, 0}

    dom = Browser.dom(url)

    assert dom =~
             ~r{<tr data-channel="browser-jobs"><td class="name">browser-jobs</td><td>10 / 10</td><td>10 B / no bound</td><td>10</td><td>0</td><td>0</td><td>1</td>}

    [table] = Regex.run(~r{<table id="channels">.*?</table>}s, dom)
    [events] = Regex.run(~r{<tr data-channel="browser-events">.*?</tr>}s, table)

    cells =
      Regex.scan(~r{<td[^>]*>(.*?)</td>}s, events, capture: :all_but_first) |> List.flatten()

    # channel, len / capacity, held / max bytes, pushed, pulled, overwritten, rejected,
    # push/s, pull/s, subscriptions, max lag, lost
    assert [
             "browser-events",
             "3 / 100",
             "3 B / 1.0 KiB",
             "3",
             "0",
             "0",
             "0",
             push_rate,
             pull_rate,
             "1",
             max_lag,
             "0"
           ] = cells

    assert push_rate =~ "<svg" and pull_rate =~ "<svg" and max_lag =~ "<svg"
    assert max_lag =~ ~r/2$/

    path =
      Path.join(System.tmp_dir!(), "ringbus-status-#{System.unique_integer([:positive])}.png")

    try do
      png = Browser.screenshot(url, path, @size)
      {width, height, rows} = Browser.decode_png(png)
      assert {width, height} == @size

      pixels = List.flatten(rows)
      # The page's background, the tables' white rows, dark text, and the
      # blue of the sparklines.
      assert Enum.count(pixels, &(&1 == {250, 250, 250})) > div(width * height, 2)
      assert Enum.count(pixels, &(&1 == {255, 255, 255})) > 10_000
      assert Enum.count(pixels, fn {r, g, b} -> r + g + b < 200 end) > 2_000
      assert Enum.count(pixels, fn {r, _g, b} -> b > r + 80 end) > 100
    after
      File.rm(path)
    end
  end

  test "at 1280 px the page is no wider than the window, with long names and large figures", %{
    url: url,
    server: server
  } do
    :ok = Ringbus.create(@long, capacity: 1_000_000, max_bytes: 512 * 1024 * 1024)
    {:ok, _} = Ringbus.push_many(@long, List.duplicate("p", 150_000))

    for i <- 1..3 do
      {:ok, _} =
        Ringbus.subscribe(@long, from: 0, max_credit: 1, name: "settlement-reconciler-#{i}")
    end

    # A replicated channel adds the table of its members.
    :ok = Ringbus.create(@long <> "-raft", replicas: 1, capacity: 1_000_000)
    {:ok, _} = Ringbus.push_many(@long <> "-raft", List.duplicate("p", 1000))

    resp = start_supervised!({Ringbus.Server, port: 0, resp_port: 0}, id: :resp)
    c = Ringbus.Test.RespClient.connect!(Ringbus.Server.port(resp, :resp))
    {_, c} = Ringbus.Test.RespClient.call(c, ["XGROUP", "CREATE", @long, "reconciler-group", "0"])

    {_, c} =
      Ringbus.Test.RespClient.call(
        c,
        ~w(XREADGROUP GROUP reconciler-group a-consumer-name COUNT 5 STREAMS) ++ [@long, ">"]
      )

    _ = {server, c}

    # The page as served, with one script added that writes down how wide
    # the document is once laid out.
    {:ok, {{_, 200, _}, _, html}} =
      :httpc.request(:get, {String.to_charlist(url), []}, [], body_format: :binary)

    probe =
      "<script>document.body.insertAdjacentHTML('beforeend', '<p id=\"measured\">' + " <>
        "document.documentElement.scrollWidth + ' ' + document.body.scrollWidth + '</p>')</script>"

    page = String.replace(html, "</body>", probe <> "</body>")

    path =
      Path.join(System.tmp_dir!(), "ringbus-width-#{System.unique_integer([:positive])}.html")

    try do
      File.write!(path, page)
      dom = Browser.dom("file://" <> path, @size)
      assert dom =~ "reconciler-group"
      assert dom =~ "settlement-reconciler-3"
      assert dom =~ ~s(<table id="replicas">)

      [document, body] =
        Regex.run(~r/<p id="measured">(\d+) (\d+)<\/p>/, dom, capture: :all_but_first)

      assert String.to_integer(document) <= 1280
      assert String.to_integer(body) <= 1280
    after
      File.rm(path)
    end
  end
end

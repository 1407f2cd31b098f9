defmodule Ringbus.HTTP.Handler do
  @moduledoc false
  # The `:inets` httpd module behind `Ringbus.HTTP`: httpd parses the
  # request and calls `do/1` in the request's own process, which gathers a
  # snapshot (`Ringbus.Metrics`) and renders it. No process is asked but the
  # subscriptions, within the snapshot's deadline; the history of the last
  # minute is read from the endpoint's ETS table, named in the httpd config.
  #
  #   GET /metrics       Prometheus text format
  #   GET /connections.json  every client connection (Ringbus.Server.clients/0)
  #   GET /status        HTML page, reloads itself
  #   GET /status.json   the same data as JSON
  #   GET /status.txt    the same data as terminal tables
  #   GET /health        200 "ok": the node runs (liveness)
  #   GET /ready         200 "ready", or 503 and why not (`Ringbus.HTTP.Health`)
  #   GET /              redirects to /status
  #
  # Other paths get 404, other methods 405.

  require Record

  Record.defrecordp(:mod, Record.extract(:mod, from_lib: "inets/include/httpd.hrl"))

  alias Ringbus.HTTP.{Health, JSON, StatusPage, StatusText}
  alias Ringbus.Metrics
  alias Ringbus.Metrics.{History, Status}

  @doc false
  # httpd's module callback.
  def unquote(:do)(request) do
    method = mod(request, :method)
    path = request |> mod(:request_uri) |> to_string() |> String.split("?", parts: 2) |> hd()
    config = mod(request, :config_db)
    {code, headers, body} = respond(method, path, config)
    body = if method == ~c"HEAD", do: [], else: body
    # Head and body leave in one write: httpd's own responses write them
    # separately, and on a socket without nodelay the second write waits out
    # the client's delayed ACK.
    :ok =
      :httpd_socket.deliver(mod(request, :socket_type), mod(request, :socket), [
        "HTTP/1.1 ",
        Integer.to_string(code),
        " ",
        reason(code),
        "\r\n",
        Enum.map(headers, fn {k, v} -> [k, ": ", v, "\r\n"] end),
        "\r\n" | body
      ])

    {:proceed, [response: {:already_sent, code, IO.iodata_length(body)}]}
  end

  defp respond(method, path, config) when method in [~c"GET", ~c"HEAD"] do
    case path do
      "/metrics" ->
        ok("text/plain; version=0.0.4; charset=utf-8", Metrics.prometheus(snapshot(config)))

      "/connections.json" ->
        ok("application/json", JSON.encode(connections()))

      "/status" ->
        ok("text/html; charset=utf-8", StatusPage.render(status(config)))

      "/status.json" ->
        ok("application/json", JSON.encode(status(config)))

      "/status.txt" ->
        ok("text/plain; charset=utf-8", StatusText.render(status(config)))

      "/health" ->
        plain(200, "ok\n")

      "/ready" ->
        case Health.ready() do
          :ok -> plain(200, "ready\n")
          {:error, why} -> plain(503, "not ready: #{why}\n")
        end

      "/" ->
        {302, [{"location", "/status"}, {"content-length", "0"}], []}

      _ ->
        plain(
          404,
          "not found; try /metrics, /status, /status.json, /status.txt, /health or /ready\n"
        )
    end
  end

  defp respond(_method, _path, _config) do
    {code, headers, body} = plain(405, "only GET and HEAD\n")
    {code, [{"allow", "GET, HEAD"} | headers], body}
  end

  defp status(config) do
    table = :httpd_util.lookup(config, :ringbus_history)
    interval = :httpd_util.lookup(config, :ringbus_interval, 1000)
    Status.build(snapshot(config), History.read(table), interval)
  end

  defp snapshot(config),
    do: Metrics.snapshot(:httpd_util.lookup(config, :ringbus_bounds, []))

  defp connections do
    %{
      node: node(),
      connections: Enum.map(Ringbus.Server.clients(), &Status.client/1)
    }
  end

  defp ok(type, body), do: response(200, type, body)

  defp plain(code, text), do: response(code, "text/plain; charset=utf-8", text)

  defp response(code, type, body) do
    body = IO.iodata_to_binary(body)

    headers = [
      {"content-type", type},
      {"content-length", Integer.to_string(byte_size(body))},
      {"cache-control", "no-store"}
    ]

    {code, headers, [body]}
  end

  defp reason(200), do: "OK"
  defp reason(302), do: "Found"
  defp reason(404), do: "Not Found"
  defp reason(405), do: "Method Not Allowed"
  defp reason(503), do: "Service Unavailable"
end

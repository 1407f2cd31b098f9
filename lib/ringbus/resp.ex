defmodule Ringbus.Resp do
  @moduledoc """
  Ringbus channels as Redis streams: a RESP2/RESP3 front end, so that any
  Redis client, `redis-cli` and `redis-benchmark` use Ringbus unchanged.

  Turn it on with the `:resp_port` option of `Ringbus.Server` (or
  `mix ringbus.server --resp-port N`, or `--resp` for Redis's port, 6379):

      children = [
        {Ringbus.Server, port: 7171, resp_port: 6379}
      ]

  and then, from any language:

      $ redis-cli -p 6379 XADD events '*' kind click
      "1-2853051905"
      $ redis-cli -p 6379 XRANGE events - +
      1) 1) "1-2853051905"
         2) 1) "kind"
            2) "click"

  The RESP listener shares the binary listener's configuration: TLS, tokens
  (`AUTH token` or `HELLO 3 AUTH default token`, with the same read and write
  grants), limits and timeouts, but for the idle timeout: RESP clients may
  idle for ever, as with Redis's `timeout 0`, unless `:resp_idle_timeout` is set.

  A stream is a channel. The entry of seq `s` has the ID `<s + 1>-<tag>`,
  the tag drawn from the channel's incarnation (an ID of an incarnation
  gone answers an error rather than entries of the new one); an
  XADD's field/value pairs are its payload, and a message pushed over the
  binary protocol reads as the one field `payload`. `docs/RESP.md` documents
  the mapping, every command, and where a ring differs from a Redis stream.
  """

  @default_port 6379

  @doc "Redis's port, which `mix ringbus.server --resp` listens on."
  @spec default_port() :: :inet.port_number()
  def default_port, do: @default_port
end

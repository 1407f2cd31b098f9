defmodule Ringbus.Server.Protocol do
  @moduledoc false
  # What one listener of a server serves: its name, its port and the process
  # each of its clients gets. A server runs one listener, connection
  # supervisor and acceptor pool per protocol (`Ringbus.Server`'s tree), all
  # sharing the server's config: TLS, tokens and limits.
  #
  # The connection module is started as `module.start_link(arg)` under the
  # protocol's connection supervisor, then given its socket with
  # `module.hand_over(pid, kind, socket)` once it owns it. `busy` is what a
  # TCP client refused over `:max_connections` is sent before the close.
  # `figures`, when given, returns figures of the protocol's own for
  # `Ringbus.Metrics` (RESP: its consumer groups), read without asking a
  # process; it is listed with the server in `Ringbus.Server.Directory`, so
  # the metrics need not know the front end.

  @enforce_keys [:name, :port, :connection, :busy]
  defstruct @enforce_keys ++ [figures: nil]

  @type t :: %__MODULE__{
          name: atom(),
          port: :inet.port_number(),
          connection: {module(), term()},
          busy: iodata(),
          figures: (() -> map()) | nil
        }
end

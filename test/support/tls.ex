defmodule Ringbus.Test.TLS do
  @moduledoc "Certificates made at test time with `:public_key.pkix_test_data/1`."

  @doc "Returns `{server_ssl_opts, client_ssl_opts}` for a fresh CA, server and client."
  def configs do
    key = [key: {:rsa, 2048, 65_537}]
    san = {:Extension, {2, 5, 29, 17}, false, [{:dNSName, ~c"localhost"}]}
    chain = %{root: key, intermediates: [], peer: key ++ [extensions: [san]]}

    %{server_config: server, client_config: client} =
      :public_key.pkix_test_data(%{server_chain: chain, client_chain: chain})

    {server, Keyword.merge(client, verify: :verify_peer, server_name_indication: ~c"localhost")}
  end

  @doc "Writes a fresh server certificate and its key as PEM files in `dir`; returns their paths."
  def pem_files!(dir) do
    {server, _client} = configs()
    {key_type, key_der} = server[:key]
    cert = Path.join(dir, "cert.pem")
    key = Path.join(dir, "key.pem")
    File.write!(cert, :public_key.pem_encode([{:Certificate, server[:cert], :not_encrypted}]))
    File.write!(key, :public_key.pem_encode([{key_type, key_der, :not_encrypted}]))
    {cert, key}
  end
end

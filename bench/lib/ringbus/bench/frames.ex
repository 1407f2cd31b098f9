defmodule Ringbus.Bench.Frames do
  @moduledoc """
  The large-frame bench: how fast one `PUSH` frame of 1 to 64 MB goes from a
  client's socket into a channel, over plain TCP and over TLS, with
  `Ringbus.Server` and with the naive reassembly of the field report
  (Fred Hébert, "On the hunt for a bug with a hump and a long tail", 2023),
  whose receiver appended every TLS read to one growing binary and reached
  30 MB/s on a 28 MB message.

      mix ringbus.bench frames
      mix ringbus.bench frames --runs 3 --out frames.csv
      mix ringbus.bench frames --sizes 1,8 --transports tcp --impl ringbus

  ## What it does

  For each transport it starts, on 127.0.0.1 and a free port:

    * `ringbus` - a `Ringbus.Server` with `max_frame_size` just above the
      largest frame and `buffer_size` as given, which decodes frames with
      `Ringbus.Wire.Decoder` (the reads of a large frame kept in a list and
      joined once);
    * `naive` - a `Ringbus.Bench.NaiveFrameReader`, a receiver with the same
      socket options that appends every read to one binary and matches the
      length prefix out of it on every read, as the report's code did.

  Both store the payload in a channel with `Ringbus.push/2` (the server through
  its usual path) and answer with `PUSH_ACKS`. TLS uses a certificate chain
  made at start-up with `:public_key.pkix_test_data/1`; the client checks it.

  The client is the bench process: one raw `:gen_tcp` or `:ssl` connection per
  receiver with 4 MiB send buffers, which says `HELLO` first and pushes one
  untimed 1 MB frame to warm the connection up. Over TLS it writes a frame in
  1 MiB slices, as `Ringbus.Client` does: handed a whole 64 MB frame, `:ssl`
  encrypts all of it before the first byte leaves, and the receiver waits.
  A transfer is timed from just
  before the frame's first byte is handed to the socket to the arrival of the
  `PUSH_ACKS` entry for it: the receiver has read, joined, decoded and stored
  the frame. The time of the send call alone would miss most of it, since the
  socket takes the bytes before they are read. The naive receiver clocks
  its own work on each frame too, from its first read to its store, and the
  bench keeps that beside the transfer's time (`receiver_ms`), which must
  contain it.

  Each size runs `--runs` times, `ringbus` and `naive` taking turns, and the
  figures are the medians. The payload of a size is built before its runs;
  after each transfer the bench pulls the message back (untimed) and checks
  its size, which also frees it.

  The naive reassembly costs time in the square of the frame size, so it has
  a cap: a size is skipped when the last size measured, scaled by the square
  of the size ratio, predicts more than `--naive-cap` seconds, and no more
  runs of a size are made once one took longer than that. A transfer still
  waiting after three times the cap is abandoned and its receiver stopped.

  ## Output

  Progress goes to stderr, a line per transfer. Then a table with, per
  transport, implementation and size, the median time, MB/s, ms per MB and,
  for `naive`, the socket reads the frame took; then the targets: MB/s at the
  largest size (TLS >= 400 MB/s, TCP >= 1 GB/s), and the time per MB at the
  largest size over the time per MB at the smallest (the "hump and tail"
  check, target at most 1.3x); then how much faster `ringbus` was than
  `naive`. MB is 2^20 bytes throughout, and 1 GB/s is 1024 MB/s.

  `--out` writes one CSV row per transport, implementation and size measured
  (skipped sizes have none) with the columns
  `transport,impl,frame_mb,ms,mb_per_s`.

  ## Command line options

    * `-s`, `--sizes` - frame payload sizes in MB, comma-separated. Defaults
      to `1,8,32,64`.
    * `-t`, `--transports` - `tcp`, `tls` or both, comma-separated. Defaults
      to `tcp,tls`.
    * `-m`, `--impl` - `ringbus`, `naive` or both. Defaults to both.
    * `-r`, `--runs` - transfers per size and implementation; figures are the
      medians. Defaults to `1`.
    * `-o`, `--out` - write the figures as CSV to this file.
    * `--naive-cap` - seconds the naive reassembly may take per transfer
      before larger sizes are skipped (see above). Defaults to `10`.
    * `--buffer-size` - the receivers' socket buffer sizes in bytes
      (`Ringbus.Server`'s `:buffer_size`). Defaults to the server's default,
      `262144`.
  """

  alias Ringbus.Bench.{Args, CSV, NaiveFrameReader, Stats}
  alias Ringbus.Wire.{Decoder, Frame}

  @mb 1_048_576
  @transports ["tcp", "tls"]
  @impls ["ringbus", "naive"]
  @header ["transport", "impl", "frame_mb", "ms", "mb_per_s"]

  @switches [
    sizes: :string,
    transports: :string,
    impl: :string,
    runs: :integer,
    out: :string,
    naive_cap: :integer,
    buffer_size: :integer
  ]

  @aliases [s: :sizes, t: :transports, m: :impl, r: :runs, o: :out]

  @client_buffer 4 * @mb
  @ringbus_timeout 60_000
  @targets %{"tcp" => 1024, "tls" => 400}
  @hump_target 1.3

  @typedoc """
  The figures of one transport, implementation and size. `ms` and
  `mb_per_s` are `nil` when the size was skipped, and `skipped` then says why.
  """
  @type result :: %{
          transport: String.t(),
          impl: String.t(),
          frame_mb: pos_integer(),
          runs: [float()],
          ms: float() | nil,
          mb_per_s: float() | nil,
          reads: number() | nil,
          receiver_ms: float() | nil,
          skipped: String.t() | nil
        }

  @doc """
  Runs the bench with command line `args` (see the module doc), prints the
  figures and returns them. Raises `OptionParser.ParseError` on an unknown
  option and `Mix.Error` on a bad value.
  """
  @spec run([String.t()]) :: [result()]
  def run(args) do
    config = parse!(args)

    IO.puts(
      "Frames bench: one PUSH of #{Enum.join(config.sizes, ", ")} MB, " <>
        "#{Enum.join(config.transports, " and ")}, #{Enum.join(config.impls, " vs ")}, " <>
        "#{config.runs} run(s), receiver buffers #{config.buffer_size} bytes; " <>
        "OTP #{System.otp_release()}, #{System.schedulers_online()} schedulers"
    )

    IO.puts("VM memory: #{Ringbus.Server.Memory.describe()}")

    results = Enum.flat_map(config.transports, &measure_transport(&1, config))

    print_table(results)
    print_targets(results, config)
    print_comparison(results, config)

    if config.out do
      rows =
        for r <- results, r.ms do
          [r.transport, r.impl, r.frame_mb, r.ms, r.mb_per_s]
        end

      CSV.write!(config.out, @header, rows)
      IO.puts("Wrote #{config.out}")
    end

    results
  end

  ## Options

  defp parse!(args) do
    opts = Args.parse!(args, @switches, @aliases)

    sizes =
      opts
      |> Keyword.get(:sizes, "1,8,32,64")
      |> String.split(",", trim: true)
      |> Enum.map(&size!(&1, opts[:sizes]))
      |> Enum.uniq()
      |> Enum.sort()

    if sizes == [], do: Mix.raise("expected --sizes to list at least one size")

    %{
      sizes: sizes,
      transports: list!(opts, :transports, @transports),
      impls: list!(opts, :impl, @impls),
      runs: Args.positive!(opts, :runs, 1),
      out: opts[:out],
      naive_cap_ms: Args.positive!(opts, :naive_cap, 10) * 1000,
      buffer_size: Args.positive!(opts, :buffer_size, Ringbus.Server.Config.default_buffer_size())
    }
  end

  defp size!(text, given) do
    case Integer.parse(text) do
      {mb, ""} when mb in 1..1024 ->
        mb

      _ ->
        Mix.raise(
          "expected --sizes to be comma-separated integers in 1..1024 (MB), got: #{inspect(given)}"
        )
    end
  end

  defp list!(opts, key, allowed) do
    given = opts |> Keyword.get(key, Enum.join(allowed, ",")) |> String.split(",", trim: true)

    if given != [] and given -- allowed == [] do
      Enum.filter(allowed, &(&1 in given))
    else
      Mix.raise(
        "expected --#{key} to be a comma-separated list of #{Enum.join(allowed, ", ")}, " <>
          "got: #{inspect(opts[key])}"
      )
    end
  end

  ## One transport

  defp measure_transport(transport, config) do
    {server_tls, client_tls} = tls(transport)
    max_frame_size = List.last(config.sizes) * @mb + 64 * 1024

    {:ok, server} =
      Ringbus.Server.start_link(
        port: 0,
        tls: server_tls,
        max_frame_size: max_frame_size,
        # Not :infinity: this server's HELLO_OK cannot encode it yet.
        idle_timeout: 3_600_000,
        auto_create: false,
        buffer_size: config.buffer_size
      )

    {:ok, naive, naive_port} =
      NaiveFrameReader.start_link(
        tls: server_tls,
        buffer_size: config.buffer_size,
        max_frame_size: max_frame_size,
        notify: self()
      )

    ports = %{"ringbus" => Ringbus.Server.port(server), "naive" => naive_port}

    targets =
      Map.new(config.impls, fn impl ->
        channel = "bench-frames-#{transport}-#{impl}-#{System.unique_integer([:positive])}"
        :ok = Ringbus.create(channel, capacity: 1, overflow: :drop_oldest)
        client = connect(transport, ports[impl], client_tls)
        reader = if impl == "naive", do: naive
        {impl, %{channel: channel, client: client, reader: reader}}
      end)

    try do
      describe_connection(transport, targets)

      warm = :binary.copy(<<0x5A>>, @mb)

      for {impl, target} <- targets do
        {:ok, _ms, _client} = transfer(target.client, target.channel, warm, @ringbus_timeout)
        check_stored!(target.channel, @mb)
        take_receiver(impl)
      end

      {results, _targets, _state} =
        Enum.reduce(config.sizes, {[], targets, %{}}, fn size, {acc, targets, state} ->
          {results, targets, state} = measure_size(transport, size, targets, state, config)
          {acc ++ results, targets, state}
        end)

      results
    after
      Enum.each(targets, fn {_impl, target} ->
        close(target.client)
        Ringbus.delete(target.channel)
      end)

      NaiveFrameReader.stop(naive)
      Supervisor.stop(server)
    end
  end

  # `state` holds, per implementation, the last size measured and its median
  # (for the naive cap) or `{:stopped, why}`.
  defp measure_size(transport, size, targets, state, config) do
    payload = payload(size)

    {active, skipped} =
      Enum.reduce(config.impls, {[], %{}}, fn impl, {active, skipped} ->
        case skip(impl, size, state, config) do
          nil -> {active ++ [impl], skipped}
          why -> {active, Map.put(skipped, impl, why)}
        end
      end)

    for {impl, why} <- skipped,
        do: IO.puts(:stderr, "#{transport} #{size} MB #{impl}: skipped: #{why}")

    {runs, targets} =
      Enum.reduce(1..config.runs, {Map.new(active, &{&1, []}), targets}, fn run, acc ->
        Enum.reduce(active, acc, fn impl, {runs, targets} ->
          if repeat?(impl, runs[impl], config) do
            label = "#{transport} #{size} MB #{impl} run #{run}/#{config.runs}"
            {sample, targets} = timed(impl, label, size, payload, targets, config)
            {Map.update!(runs, impl, &(&1 ++ [sample])), targets}
          else
            {runs, targets}
          end
        end)
      end)

    results =
      for impl <- config.impls do
        summarize(transport, impl, size, Map.get(runs, impl), Map.get(skipped, impl))
      end

    state =
      Enum.reduce(results, state, fn
        %{skipped: nil, ms: ms, impl: impl}, state when is_float(ms) ->
          Map.put(state, impl, {size, ms})

        %{skipped: why, impl: impl}, state ->
          if match?({:stopped, _}, state[impl]),
            do: state,
            else: Map.put(state, impl, {:stopped, why})
      end)

    {results, targets, state}
  end

  defp skip(impl, _size, state, _config) when not is_map_key(state, impl), do: nil

  defp skip(impl, size, state, config) do
    case state[impl] do
      {:stopped, why} ->
        why

      {last_size, last_ms} when impl == "naive" ->
        predicted = last_ms * :math.pow(size / last_size, 2)

        if predicted > config.naive_cap_ms do
          "naive would take > #{div(config.naive_cap_ms, 1000)} s " <>
            "(#{last_size} MB took #{seconds(last_ms)}; the copying grows with the square " <>
            "of the size, so about #{seconds(predicted)})"
        end

      _ ->
        nil
    end
  end

  # The naive reassembly stops repeating a size once a run passes the cap.
  defp repeat?("naive", samples, config) do
    not Enum.any?(samples, fn
      %{ms: ms} -> ms > config.naive_cap_ms
      %{error: _} -> true
    end)
  end

  defp repeat?(_impl, _samples, _config), do: true

  defp timed(impl, label, size, payload, targets, config) do
    target = targets[impl]

    timeout = if impl == "naive", do: 3 * config.naive_cap_ms, else: @ringbus_timeout

    case transfer(target.client, target.channel, payload, timeout) do
      {:ok, ms, client} ->
        check_stored!(target.channel, size * @mb)
        receiver = take_receiver(impl)

        IO.puts(
          :stderr,
          "#{label}: #{ms(ms)}, #{mb_per_s(size, ms)} MB/s" <>
            if(receiver,
              do: ", #{receiver.reads} reads, receiver busy #{ms(receiver.receiver_ms)}",
              else: ""
            )
        )

        sample = Map.merge(%{ms: ms, reads: nil, receiver_ms: nil}, receiver || %{})
        {sample, Map.put(targets, impl, %{target | client: client})}

      {:error, reason} ->
        IO.puts(:stderr, "#{label}: abandoned after #{seconds(timeout)} (#{inspect(reason)})")
        # Its receiver would go on copying and slow down every later transfer.
        if reader = target[:reader], do: NaiveFrameReader.stop(reader)
        {%{error: "abandoned after #{seconds(timeout)}"}, targets}
    end
  end

  defp summarize(transport, impl, size, nil, why) do
    %{
      transport: transport,
      impl: impl,
      frame_mb: size,
      runs: [],
      ms: nil,
      mb_per_s: nil,
      reads: nil,
      receiver_ms: nil,
      skipped: why
    }
  end

  defp summarize(transport, impl, size, samples, nil) do
    measured = for %{ms: _} = sample <- samples, do: sample
    errors = for %{error: error} <- samples, do: error
    ms = measured |> Enum.map(& &1.ms) |> Stats.median()
    reads = measured |> Enum.map(& &1.reads) |> Enum.reject(&is_nil/1) |> Stats.median()
    busy = measured |> Enum.map(& &1.receiver_ms) |> Enum.reject(&is_nil/1) |> Stats.median()

    %{
      transport: transport,
      impl: impl,
      frame_mb: size,
      runs: Enum.map(measured, & &1.ms),
      ms: ms && ms * 1.0,
      mb_per_s: ms && size / (ms / 1000),
      reads: reads,
      receiver_ms: busy,
      skipped: if(errors != [], do: hd(errors))
    }
  end

  ## The client

  defp tls("tcp"), do: {nil, nil}

  defp tls("tls") do
    key = [key: {:rsa, 2048, 65537}]
    chain = %{root: key, intermediates: [], peer: key}
    data = :public_key.pkix_test_data(%{server_chain: chain, client_chain: chain})
    server = Keyword.take(data.server_config, [:cert, :key])

    client = [
      cacerts: data.client_config[:cacerts],
      verify: :verify_peer,
      server_name_indication: :disable
    ]

    {server, client}
  end

  defp connect(transport, port, client_tls) do
    opts = [
      :binary,
      packet: :raw,
      active: false,
      nodelay: true,
      sndbuf: @client_buffer,
      buffer: 64 * 1024
    ]

    {mod, {:ok, socket}} =
      case transport do
        "tcp" -> {:gen_tcp, :gen_tcp.connect(~c"127.0.0.1", port, opts, 5_000)}
        "tls" -> {:ssl, :ssl.connect(~c"127.0.0.1", port, opts ++ client_tls, 5_000)}
      end

    client = %{mod: mod, socket: socket, decoder: Decoder.new(64 * 1024), corr: 1}
    :ok = mod.send(socket, Frame.encode({:hello, 1, Frame.version(), 0, nil}))
    {:ok, [{:hello_ok, 1, _version, _limits}], client} = recv_frames(client, deadline(5_000))
    %{client | corr: 2}
  end

  defp close(%{mod: mod, socket: socket}), do: mod.close(socket)

  defp describe_connection("tls", targets) do
    {_impl, %{client: client}} = Enum.at(targets, 0)

    {:ok, info} = :ssl.connection_information(client.socket, [:protocol, :selected_cipher_suite])

    suite = info[:selected_cipher_suite]

    IO.puts(
      "tls: #{info[:protocol]}, cipher #{suite.cipher}, " <>
        "certificate from :public_key.pkix_test_data/1"
    )
  end

  defp describe_connection(_transport, _targets), do: :ok

  # Times one PUSH from the first byte written to its PUSH_ACKS entry.
  defp transfer(client, channel, payload, timeout) do
    corr = client.corr
    frame = Frame.encode({:push, corr, :ack, channel, payload})
    :erlang.garbage_collect()

    started = System.monotonic_time()
    :ok = write(client, frame)

    case await_ack(client, corr, deadline(timeout)) do
      {:ok, client} ->
        elapsed = System.monotonic_time() - started
        ms = System.convert_time_unit(elapsed, :native, :microsecond) / 1000
        {:ok, ms, %{client | corr: corr + 1}}

      {:error, reason} ->
        {:error, reason}
    end
  end

  # Over TLS in 1 MiB slices, as `Ringbus.Client` writes (see `Ringbus.Socket.TLS`).
  defp write(%{mod: :ssl, socket: socket}, frame), do: Ringbus.Socket.TLS.send(socket, frame)
  defp write(%{mod: :gen_tcp, socket: socket}, frame), do: :gen_tcp.send(socket, frame)

  defp await_ack(client, corr, deadline) do
    with {:ok, frames, client} <- recv_frames(client, deadline) do
      acks = for {:push_acks, _count, acks} <- frames, ack <- acks, do: ack

      case List.keyfind(acks, corr, 0) do
        {^corr, {:ok, _seq}} -> {:ok, client}
        {^corr, {:error, reason}} -> {:error, reason}
        nil -> await_ack(client, corr, deadline)
      end
    end
  end

  # Reads until at least one whole frame has come.
  defp recv_frames(client, deadline) do
    timeout = max(deadline - System.monotonic_time(:millisecond), 0)

    with {:ok, data} <- client.mod.recv(client.socket, 0, timeout),
         {:ok, frames, decoder} <- Decoder.feed(client.decoder, data) do
      client = %{client | decoder: decoder}
      if frames == [], do: recv_frames(client, deadline), else: {:ok, frames, client}
    else
      {:error, reason, _frames} -> {:error, reason}
      {:error, reason} -> {:error, reason}
    end
  end

  defp deadline(timeout), do: System.monotonic_time(:millisecond) + timeout

  defp payload(size) do
    block = :crypto.strong_rand_bytes(@mb)
    IO.iodata_to_binary(List.duplicate(block, size))
  end

  defp check_stored!(channel, bytes) do
    case Ringbus.pull(channel) do
      {:ok, _seq, payload} when byte_size(payload) == bytes ->
        :ok

      other ->
        raise "expected a #{bytes}-byte message in #{channel}, got: #{inspect(other, limit: 5)}"
    end
  end

  # The naive receiver's own account of the frame: its reads and its busy time.
  defp take_receiver("naive") do
    receive do
      {NaiveFrameReader, :frame, reads, busy} ->
        %{reads: reads, receiver_ms: System.convert_time_unit(busy, :native, :microsecond) / 1000}
    after
      1_000 -> nil
    end
  end

  defp take_receiver(_impl), do: nil

  ## Printing

  defp print_table(results) do
    IO.puts("")

    IO.puts(
      pad("transport", 10) <>
        pad("impl", 9) <>
        lpad("MB", 5) <>
        lpad("median ms", 12) <> lpad("MB/s", 10) <> lpad("ms/MB", 9) <> lpad("reads", 8)
    )

    for r <- results do
      line =
        if r.ms do
          lpad(ms_text(r.ms), 12) <>
            lpad(float(r.mb_per_s, 1), 10) <>
            lpad(float(r.ms / r.frame_mb, 2), 9) <>
            lpad(if(r.reads, do: float(r.reads * 1.0, 0), else: "-"), 8)
        else
          "  skipped: #{r.skipped}"
        end

      IO.puts(pad(r.transport, 10) <> pad(r.impl, 9) <> lpad("#{r.frame_mb}", 5) <> line)
    end
  end

  defp print_targets(results, config) do
    largest = List.last(config.sizes)
    smallest = hd(config.sizes)

    IO.puts("\nTargets (MB = 2^20 bytes, 1 GB/s = 1024 MB/s):")

    for transport <- config.transports, "ringbus" in config.impls do
      target = @targets[transport]

      case find(results, transport, "ringbus", largest) do
        %{mb_per_s: rate} when is_float(rate) ->
          IO.puts(
            "  #{transport} ringbus at #{largest} MB: #{float(rate, 1)} MB/s " <>
              "(target >= #{target}): #{verdict(rate >= target)}"
          )

        _ ->
          IO.puts("  #{transport} ringbus at #{largest} MB: not measured")
      end
    end

    if largest > smallest do
      IO.puts(
        "Time per MB at #{largest} MB over time per MB at #{smallest} MB " <>
          "(hump and tail; target <= #{@hump_target}x):"
      )

      for transport <- config.transports, impl <- config.impls do
        small = find(results, transport, impl, smallest)
        large = find(results, transport, impl, largest)

        text =
          case {small, large} do
            {%{ms: s}, %{ms: l}} when is_float(s) and is_float(l) ->
              ratio = l / largest / (s / smallest)
              target = if impl == "ringbus", do: ": #{verdict(ratio <= @hump_target)}", else: ""
              "#{float(ratio, 2)}x#{target}"

            _ ->
              "not measured at both sizes"
          end

        IO.puts("  #{transport} #{impl}: #{text}")
      end
    end
  end

  defp print_comparison(results, config) do
    if config.impls == @impls do
      IO.puts("ringbus compared with naive (naive time / ringbus time):")

      for transport <- config.transports, size <- config.sizes do
        text =
          case {find(results, transport, "ringbus", size),
                find(results, transport, "naive", size)} do
            {%{ms: r}, %{ms: n}} when is_float(r) and is_float(n) -> "#{float(n / r, 1)}x faster"
            _ -> "naive not measured"
          end

        IO.puts("  #{transport} #{size} MB: #{text}")
      end
    end
  end

  defp find(results, transport, impl, size),
    do:
      Enum.find(results, &(&1.transport == transport and &1.impl == impl and &1.frame_mb == size))

  defp verdict(true), do: "met"
  defp verdict(false), do: "missed"

  defp ms(ms), do: "#{ms_text(ms)} ms"
  defp ms_text(ms), do: float(ms, 1)

  defp seconds(ms), do: "#{float(ms / 1000, 1)} s"

  defp mb_per_s(size, ms), do: float(size / (ms / 1000), 1)

  defp float(value, 0), do: value |> round() |> Integer.to_string()
  defp float(value, decimals), do: :erlang.float_to_binary(value * 1.0, decimals: decimals)

  defp pad(text, width), do: String.pad_trailing(text, width)
  defp lpad(text, width), do: String.pad_leading(text, width)
end

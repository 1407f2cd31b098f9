defmodule Ringbus.ReadmeTest do
  # README's "Ten lines" example runs as it is written.
  use ExUnit.Case, async: false

  test "the ten lines of README run" do
    [_, after_heading] = String.split(File.read!("README.md"), "## Ten lines", parts: 2)
    [_, code, _] = String.split(after_heading, ["```elixir\n", "```\n"], parts: 3)

    Ringbus.delete("events")
    on_exit(fn -> Ringbus.delete("events") end)

    # Run in a process of its own: the example subscribes its caller.
    task = Task.async(fn -> Code.eval_string(code) end)
    assert {_result, _binding} = Task.await(task, 5_000)
  end

  test "the Time example of README runs" do
    [_, after_heading] = String.split(File.read!("README.md"), "## Time", parts: 2)
    [_, code, _] = String.split(after_heading, ["```elixir\n", "```\n"], parts: 3)

    Ringbus.delete("clicks")
    on_exit(fn -> Ringbus.delete("clicks") end)

    # Run in a process of its own: the example subscribes its caller.
    task = Task.async(fn -> Code.eval_string(code) end)
    assert {_result, binding} = Task.await(task, 5_000)
    assert is_integer(binding[:t])
    assert {:ok, [%{name: "since-t", lag: 3}]} = Ringbus.Groups.info("clicks")
  end

  test "the work queue: a worker killed mid-message, whose message another worker gets" do
    work_queue(work_queue_code())
  end

  test "the work queue on a replicated channel, as README says it runs" do
    code = work_queue_code()
    [_, section] = String.split(File.read!("README.md"), "## Work queue", parts: 2)
    assert section =~ ~s[Ringbus.create("jobs", capacity: 1_000,\nreplicas: 1)]
    create = ~s[Ringbus.create("jobs", capacity: 1_000)]
    assert code =~ create

    work_queue(
      String.replace(code, create, ~s[Ringbus.create("jobs", capacity: 1_000, replicas: 1)])
    )

    assert {:ok, %{replicas: 1}} = Ringbus.info("jobs")
  end

  defp work_queue_code do
    [_, after_heading] = String.split(File.read!("README.md"), "## Work queue", parts: 2)
    [_, code, _] = String.split(after_heading, ["```elixir\n", "```\n"], parts: 3)
    code
  end

  defp work_queue(code) do
    Ringbus.delete("jobs")
    on_exit(fn -> Ringbus.delete("jobs") end)

    # Run in a process of its own: the example receives its workers' messages.
    task = Task.async(fn -> ExUnit.CaptureIO.capture_io(fn -> Code.eval_string(code) end) end)
    lines = String.split(Task.await(task, 10_000), "\n", trim: true)

    assert [killed] = for(line <- lines, [_, w] <- [Regex.run(~r/^(w\d) killed/, line)], do: w)

    assert [again] =
             for(
               line <- lines,
               [_, w] <- [Regex.run(~r/^(w\d) did slow \(delivery 2\)$/, line)],
               do: w
             )

    assert again != killed
    assert length(lines) == 4
    assert {:ok, [%{acked: 3, pending: 0, redelivered: 1}]} = Ringbus.Groups.info("jobs")
  end

  test "the network example prints what README says it prints" do
    [_, section] = String.split(File.read!("README.md"), "## Over the network", parts: 2)
    [_, code] = Regex.run(~r/mix run -e '(.*?)'/s, section)
    [_, printed] = Regex.run(~r/which prints `([^`]+)`/, section)

    server = start_supervised!({Ringbus.Server, port: 0})
    Ringbus.delete("events")
    on_exit(fn -> Ringbus.delete("events") end)

    code = String.replace(code, "port: 7171", "port: #{Ringbus.Server.port(server)}")
    output = ExUnit.CaptureIO.capture_io(fn -> Code.eval_string(code) end)
    assert String.trim(output) == printed
  end

  test "README names every Debian package bin/test installs" do
    installed =
      Regex.scan(~r/need\+=\(([a-z0-9.-]+)\)/, File.read!("bin/test"), capture: :all_but_first)
      |> List.flatten()

    [_, sentence] =
      Regex.run(~r/Run the whole test suite \(installs(.*?)\):/s, File.read!("README.md"))

    named = Regex.scan(~r/`([a-z0-9.-]+)`/, sentence, capture: :all_but_first) |> List.flatten()

    assert installed != []
    assert Enum.sort(named) == Enum.sort(installed)
  end
end

defmodule Ringbus.Server.Memory do
  @moduledoc false
  # What the VM's allocators do with the large binaries a server makes: socket
  # reads and the frames joined from them. Read at start-up by
  # `mix ringbus.server` and the benches, to say how this VM is set up.
  #
  # A binary above the binary allocator's single-block carrier threshold
  # (`+MBsbct`, 512 KB by default) gets a carrier of its own: an mmap, fresh
  # pages faulted in one by one, an munmap when it is freed. Reads stay below
  # it (`:buffer_size`, 256 KiB by default). A frame of several MB cannot, and
  # every such frame costs its size in page faults, unless the VM has a super
  # carrier (`+MMscs`): carriers freed inside it keep their pages, and the
  # next large frame reuses them (measured: "Large frames and the VM's
  # memory" in `Ringbus.Server`'s docs).

  @recommended "+MMscs 4096 +MMsco false"

  @doc "The emulator flags recommended for servers that take multi-MB frames."
  @spec recommended_flags() :: String.t()
  def recommended_flags, do: @recommended

  @doc "The binary allocator's single-block carrier threshold, in bytes."
  @spec single_block_threshold() :: non_neg_integer()
  def single_block_threshold do
    :erlang.system_info({:allocator, :binary_alloc})
    |> Enum.find_value(0, fn
      {:instance, 0, info} -> get_in(info, [:options, :sbct])
      _ -> nil
    end)
  end

  @doc "The size of the VM's super carrier in bytes; 0 when it has none."
  @spec super_carrier() :: non_neg_integer()
  def super_carrier do
    case :erlang.system_info({:allocator, :erts_mmap}) do
      info when is_list(info) -> get_in(info, [:default_mmap, :options, :scs]) || 0
      _ -> 0
    end
  end

  @doc "One line on the setup above, with the recommended flags if they are missing."
  @spec describe() :: String.t()
  def describe do
    sbct = "binaries above #{div(single_block_threshold(), 1024)} KB get carriers of their own"

    case super_carrier() do
      0 ->
        "#{sbct}; no super carrier, so multi-MB frames take fresh pages " <>
          "(ELIXIR_ERL_OPTIONS=\"#{@recommended}\" reuses them)"

      bytes ->
        "#{sbct}; super carrier of #{div(bytes, 1024 * 1024)} MB, reused by multi-MB frames"
    end
  end
end

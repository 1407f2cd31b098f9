defmodule Ringbus.Server.MemoryTest do
  use ExUnit.Case, async: true

  alias Ringbus.Server.Memory

  test "reads the single-block carrier threshold of the binary allocator" do
    threshold = Memory.single_block_threshold()
    assert is_integer(threshold) and threshold > 0
    assert Memory.describe() =~ "binaries above #{div(threshold, 1024)} KB"
  end

  test "says whether the VM has a super carrier, and the flags when it has none" do
    case Memory.super_carrier() do
      0 -> assert Memory.describe() =~ Memory.recommended_flags()
      bytes -> assert Memory.describe() =~ "super carrier of #{div(bytes, 1024 * 1024)} MB"
    end
  end
end

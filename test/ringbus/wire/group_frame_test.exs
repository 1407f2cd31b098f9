defmodule Ringbus.Wire.GroupFrameTest do
  # What docs/PROTOCOL.md section 11 calls malformed in a group frame, by
  # field; the round trips are the frame properties' and the vectors'.
  use ExUnit.Case, async: true

  import Bitwise

  alias Ringbus.Wire.Frame

  defp decode(opcode, body),
    do: Frame.decode(<<byte_size(body) + 1::32, opcode, body::binary>>, 1 <<< 20)

  defp s(binary), do: <<byte_size(binary)::16, binary::binary>>

  # GROUP_CREATE of channel "c", group "g", with the fields after the group.
  defp create(tail), do: decode(0x10, <<1::32>> <> s("c") <> s("g") <> tail)

  test "GROUP_CREATE: from, ack_wait and dead_letter are checked" do
    assert {:ok, {:group_create, 1, "c", "g", 7, 5, :infinity, 9, nil}, ""} =
             create(<<0, 7::64, 5::32, 0::32, 9::32, 0::16>>)

    assert {:ok, {:group_create, 1, "c", "g", {:time, 3}, 5, :infinity, 9, nil}, ""} =
             create(<<3, 3::64, 5::32, 0::32, 9::32, 0::16>>)

    assert create(<<4, 0::64, 5::32, 0::32, 9::32, 0::16>>) ==
             {:error, {:bad_field, :group_create, :from}}

    assert create(<<1, 4::64, 5::32, 0::32, 9::32, 0::16>>) ==
             {:error, {:bad_field, :group_create, :from}}

    assert create(<<1, 0::64, 0::32, 0::32, 9::32, 0::16>>) ==
             {:error, {:bad_field, :group_create, :ack_wait}}

    long = String.duplicate("d", 256)

    assert create(<<1, 0::64, 5::32, 0::32, 9::32>> <> s(long)) ==
             {:error, {:bad_field, :group_create, :dead_letter}}

    assert create(<<1, 0::64, 5::32, 0::32, 9::32>>) == {:error, {:truncated, :group_create}}
  end

  test "names: a channel of 1 to 255 bytes, a group or consumer of 1 to 65,535" do
    fetch = fn channel, group, consumer ->
      decode(0x11, <<1::32>> <> s(channel) <> s(group) <> s(consumer) <> <<1::32, 0::32>>)
    end

    long = String.duplicate("x", 300)
    assert {:ok, {:group_fetch, 1, "c", ^long, ^long, 1, 0}, ""} = fetch.("c", long, long)
    assert fetch.(long, "g", "w") == {:error, {:bad_field, :group_fetch, :name}}
    assert fetch.("c", "", "w") == {:error, {:bad_field, :group_fetch, :group}}
    assert fetch.("c", "g", "") == {:error, {:bad_field, :group_fetch, :consumer}}
  end

  test "a seq list is its count of seqs, to the end of the body" do
    ack = fn tail -> decode(0x12, <<1::32>> <> s("c") <> s("g") <> tail) end
    assert {:ok, {:group_ack, 1, "c", "g", 2, [3, 4]}, ""} = ack.(<<2::32, 3::64, 4::64>>)
    assert {:ok, {:group_ack, 1, "c", "g", 0, []}, ""} = ack.(<<0::32>>)
    assert ack.(<<3::32, 3::64, 4::64>>) == {:error, {:truncated, :group_ack}}
    assert ack.(<<1::32, 3::64, 4::64>>) == {:error, {:trailing_bytes, :group_ack}}
    assert ack.(<<1::32, 3::64, 4>>) == {:error, {:trailing_bytes, :group_ack}}

    assert_raise ArgumentError, fn -> Frame.encode({:group_ack, 1, "c", "g", 3, [1, 2]}) end
  end

  test "GROUP_MESSAGES: flags other than 0x01 and 0x02 are malformed; a count that lies is truncated" do
    message = <<1::64, 1::32, 1::32, "a">>

    assert {:ok, {:group_messages, 1, true, 1, [{1, "a", 1}]}, ""} =
             decode(0x8D, <<1::32, 1, 1::32>> <> message)

    assert decode(0x8D, <<1::32, 4, 1::32>> <> message) ==
             {:error, {:bad_field, :group_messages, :flags}}

    # With times (0x02), each message's time follows its deliveries.
    timed = <<1::64, 1::32, 9::64, 1::32, "a">>

    assert {:ok, {:group_messages, 1, false, 1, [{1, "a", 1, 9}]}, ""} =
             decode(0x8D, <<1::32, 2, 1::32>> <> timed)

    assert decode(0x8D, <<1::32, 0, 2::32>> <> message) == {:error, {:truncated, :group_messages}}

    assert decode(0x8D, <<1::32, 0, 0::32>> <> message) ==
             {:error, {:trailing_bytes, :group_messages}}
  end

  test "GROUP_MESSAGES: a time not known (nil, the message left the ring first) goes as 0" do
    frame = {:group_messages, 1, false, 2, [{1, "a", 1, nil}, {2, "b", 1, 9}]}
    encoded = IO.iodata_to_binary(Frame.encode(frame))

    assert {:ok, {:group_messages, 1, false, 2, [{1, "a", 1, 0}, {2, "b", 1, 9}]}, ""} =
             Frame.decode(encoded, 1 <<< 20)
  end
end

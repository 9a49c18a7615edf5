"""coordinator_slot is Kafka's partitionFor(groupId): Utils.abs(String.hashCode) % 50.
Expected hashes were printed by Java 17's String.hashCode."""

from sink.groups.placement import coordinator_slot, java_string_hash


def test_java_hash_and_slots():
    assert java_string_hash("") == 0
    assert java_string_hash("test") == 3556498
    assert java_string_hash("console-consumer-12345") == 158455506
    # Java's famous Integer.MIN_VALUE hash: Utils.abs maps it to 0 (Math.abs would not)
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert coordinator_slot("polygenelubricants") == 0
    assert coordinator_slot("test") == 3556498 % 50
    assert coordinator_slot("console-consumer-12345") == 158455506 % 50
    # UTF-16 code units, surrogate pairs included
    assert java_string_hash("é") == 0xE9
    assert java_string_hash("😀") == 1772899 == 0xD83D * 31 + 0xDE00
    assert all(0 <= coordinator_slot(f"g{i}") < 50 for i in range(1000))

package zone

import "maps"

// shardCount is the number of shards of a shardMap: an update copies only the shards it touches, so rebuilding
// one service copies about 1/1024 of the index instead of all of it.
const shardCount = 1024

// shardMap is a copy-on-write map split into shards by key hash. A published shardMap is never written; with
// returns a new one that shares every untouched shard.
type shardMap[V any] struct {
	shards [shardCount]map[string]V
	len    int
}

// shardOf hashes a key with FNV-1a; it runs on the query path, so it must not allocate.
func shardOf(key string) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % shardCount)
}

func (m *shardMap[V]) get(key string) (V, bool) {
	v, ok := m.shards[shardOf(key)][key]
	return v, ok
}

// with returns a copy of m with upserts stored and deletes removed.
func (m *shardMap[V]) with(upserts map[string]V, deletes []string) shardMap[V] {
	out := *m
	var copied [shardCount]bool
	shard := func(key string) map[string]V {
		i := shardOf(key)
		if !copied[i] {
			next := make(map[string]V, len(m.shards[i])+1)
			maps.Copy(next, m.shards[i])
			out.shards[i] = next
			copied[i] = true
		}
		return out.shards[i]
	}
	for key, v := range upserts {
		s := shard(key)
		if _, had := s[key]; !had {
			out.len++
		}
		s[key] = v
	}
	for _, key := range deletes {
		s := shard(key)
		if _, had := s[key]; had {
			delete(s, key)
			out.len--
		}
	}
	return out
}

// keys returns every key, in no particular order.
func (m *shardMap[V]) keys() []string {
	out := make([]string, 0, m.len)
	for i := range m.shards {
		for k := range m.shards[i] {
			out = append(out, k)
		}
	}
	return out
}

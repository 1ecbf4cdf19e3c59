import json, sys
v = json.load(open(sys.argv[1]))
c = v.get("cache", {})
print(f"  {v['backend']:5} {v['tokens_per_s']:7.2f} tok/s  load {v['load_seconds']:.2f} s  "
      f"hit {c.get('hit_rate', 0) * 100:5.1f}%  {v.get('mib_streamed_per_token', 0):6.1f} MiB/tok  "
      f"stall {v.get('stall_fraction', 0) * 100:4.1f}%  digest {v['digest'][:12]}")

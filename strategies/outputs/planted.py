"""Planted bugs and benign refactors of logprobs-tensors-to-cpu (optimized/outputs.py), collected by
tests/planted. Each is a one-edit mutant of the optimized copy: Plant(name, base_target, module, old, new, why).

On the CPU ``to_cpu_nonblocking`` returns ``self`` (no copy), so the bugs a CPU run must report sit in what
runs on both devices (the CPU early return, ``tolists``); the race plants edit the CUDA copy path.
"""

from fuzz.api import Plant, SharedPlant

_OPT = "optimized.outputs"
_TARGET = "logprobs-tensors-to-cpu"

BUGS = [
    Plant("planted-logprobs-device-boundaries-ignored", _TARGET, _OPT,
          "                cu_num_generated_tokens = self.cu_num_generated_tokens_tensor.tolist()",
          "                cu_num_generated_tokens = self.cu_num_generated_tokens",
          "the device boundaries of adaptive verification never read: the scheduler gets None and slices "
          "request i as row i (the misassigned rows PR #52242 fixed)"),
    Plant("planted-logprobs-ranks-from-ids", _TARGET, _OPT,
          "            self.selected_token_ranks.cpu().numpy(),",
          "            self.logprob_token_ids[:, 0].cpu().numpy(),",
          "the sampled token's id handed out as its rank"),
    Plant("planted-logprobs-cpu-return-drops-boundaries", _TARGET, _OPT,
          '        if self.logprob_token_ids.device.type == "cpu":\n            return self',
          '        if self.logprob_token_ids.device.type == "cpu":\n'
          "            return self._replace(cu_num_generated_tokens_tensor=None)",
          "the CPU shortcut drops the device boundaries: tolists then has none",
          shows_on=("cpu",)),  # the shortcut is for a tensor already on the host: CUDA examples never take it
]

_LISTS = "sampling-mask-lists-to-nested-list"
BUGS += [
    Plant("planted-nested-list-one-position-flat", _LISTS, _OPT,
          "            return [token_ids]", "            return token_ids",
          "a one-position slice returned flat: the output processor takes each id for a position"),
    Plant("planted-nested-list-last-position-dropped", _LISTS, _OPT,
          "for i in range(len(offsets) - 1)]", "for i in range(len(offsets) - 2)]",
          "the last position of a multi-position (spec decode) slice dropped"),
    Plant("planted-nested-list-numpy-scalars", _LISTS, _OPT,
          "        token_ids = self.token_ids.tolist()", "        token_ids = list(self.token_ids)",
          "ids kept as numpy int32 scalars: not the list[list[int]] the user gets and msgspec serializes"),
]

_EMPTY = "logprobs-tensors-empty-cpu"
BUGS += [
    Plant("planted-empty-cpu-ids-int64", _EMPTY, _OPT,
          "            dtype=torch.int32,\n            device=\"cpu\",",
          "            dtype=torch.int64,\n            device=\"cpu\",",
          "the ids allocated int64: twice the host memory, and not the int32 the scheduler's arrays had"),
    Plant("planted-empty-cpu-logprobs-half", _EMPTY, _OPT,
          "            dtype=torch.float32,\n            pin_memory=PIN_MEMORY,",
          "            dtype=torch.float16,\n            pin_memory=PIN_MEMORY,",
          "the logprobs allocated float16: the copy rounds every log-probability"),
    Plant("planted-empty-cpu-ranks-per-column", _EMPTY, _OPT,
          "            num_positions, pin_memory=PIN_MEMORY",
          "            (num_positions, num_tokens_per_position), pin_memory=PIN_MEMORY",
          "one rank per column instead of per position: the copy broadcasts each rank across a row"),
]

BENIGN = [
    Plant("benign-empty-cpu-logprobs-like-ids", _EMPTY, _OPT,
          "        logprobs = logprob_token_ids.new_empty(\n            (num_positions, num_tokens_per_position),",
          "        logprobs = logprob_token_ids.new_empty(\n            logprob_token_ids.shape,",
          "the ids' shape is (num_positions, num_tokens_per_position)"),
    Plant("benign-nested-list-offsets-as-ints", _LISTS, _OPT,
          "        offsets = self.offsets.tolist()", "        offsets = [int(o) for o in self.offsets]",
          "the same Python ints, one element at a time"),
    Plant("benign-logprobs-boundaries-as-ints", _TARGET, _OPT,
          "                cu_num_generated_tokens = self.cu_num_generated_tokens_tensor.tolist()",
          "                cu_num_generated_tokens = [int(v) for v in self.cu_num_generated_tokens_tensor]",
          "the same Python ints, one element at a time (the tensor is on the host after the copy)"),
]

# ---- the D2H race of issue #44 (fuzz/oracles/races.py; CUDA only: on the CPU no copy is asynchronous and
# to_cpu_nonblocking returns before the edited lines)

_COPY_BOUNDARIES = '            cu_tensor = cu_tensor.to("cpu", non_blocking=True)\n'

RACE_BUGS = [
    Plant("planted-race-logprobs-boundaries-read-early", _TARGET, _OPT, _COPY_BOUNDARIES,
          _COPY_BOUNDARIES
          + "            # the boundaries turned into a list at once: the pinned host copy may still be pending\n"
          + "            return self._replace(\n"
          + '                logprob_token_ids=self.logprob_token_ids.to("cpu", non_blocking=True),\n'
          + '                logprobs=self.logprobs.to("cpu", non_blocking=True),\n'
          + '                selected_token_ranks=self.selected_token_ranks.to("cpu", non_blocking=True),\n'
          + "                cu_num_generated_tokens=cu_tensor.tolist(),\n"
          + "                cu_num_generated_tokens_tensor=None,\n"
          + "            )\n",
          "the device boundaries read (.tolist() of the pinned D2H destination) before the copy's event, as "
          "vLLM #36013 / #36942 read a pinned D2H result early: the scheduler gets whatever the host memory held"),
]

RACE_BENIGN = [
    Plant("benign-race-logprobs-boundaries-read-after-event", _TARGET, _OPT, _COPY_BOUNDARIES,
          _COPY_BOUNDARIES
          + "            copied = torch.cuda.Event()\n"
          + "            copied.record()\n"
          + "            copied.synchronize()  # the copy's event first: then the pinned list is real\n"
          + "            return self._replace(\n"
          + '                logprob_token_ids=self.logprob_token_ids.to("cpu", non_blocking=True),\n'
          + '                logprobs=self.logprobs.to("cpu", non_blocking=True),\n'
          + '                selected_token_ranks=self.selected_token_ranks.to("cpu", non_blocking=True),\n'
          + "                cu_num_generated_tokens=cu_tensor.tolist(),\n"
          + "                cu_num_generated_tokens_tensor=None,\n"
          + "            )\n",
          "the race plant's early list, read only after waiting on an event recorded behind the copy"),
]

# ---- one slip in both copies: only the invariants can see it (tests/e2e/test_oracles.py)

SHARED_BUGS = [
    SharedPlant(
        name="shared-logprobs-ranks-from-ids",
        base_target=_TARGET,
        legacy=("legacy.outputs", "            self.selected_token_ranks.cpu().numpy(),",
                "            self.logprob_token_ids[:, 0].cpu().numpy(),"),
        optimized=(_OPT, "            self.selected_token_ranks.cpu().numpy(),",
                   "            self.logprob_token_ids[:, 0].cpu().numpy(),"),
        why="both releases hand out the sampled token's id as its rank: lists_hold_the_sampled_values sees it",
    ),
]

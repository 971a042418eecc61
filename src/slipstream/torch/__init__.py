"""``slipstream.torch.DataLoader``: a drop-in for ``torch.utils.data.DataLoader``, loaded by slipstream.

    from slipstream.torch import DataLoader   # instead of: from torch.utils.data import DataLoader

It takes torch's signature unchanged (``dataset, batch_size=1, shuffle=None, sampler=None,
batch_sampler=None, num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
worker_init_fn=None, multiprocessing_context=None, generator=None, *, prefetch_factor=None,
persistent_workers=False, pin_memory_device='', in_order=True``), plus keyword-only extras:

* ``backend``: None (the default: worker *processes* when ``num_workers > 0``, as torch) or
  ``"process"``; ``"thread"`` loads in worker threads instead (best when the samples' work
  releases the GIL: decoding, NumPy, I/O).
* ``device``: None or ``"cpu"`` (nothing is moved), or a CUDA device: each batch is copied there
  on a side CUDA stream one batch ahead of the consumer (``non_blocking``, ``pin_memory`` first if
  asked), so the copy overlaps the training step. A CUDA device without CUDA raises RuntimeError.
* ``seed``: None keeps torch's shuffling exactly (below). An int makes ``shuffle=True`` use
  slipstream's own permutation, a pure function of ``(seed, epoch)`` that ignores torch's RNGs, and
  seeds ``ss.sample_rng()``.

It *is* a ``torch.utils.data.DataLoader`` (a subclass), so ``isinstance`` checks, ``len()``, the
``sampler``/``batch_sampler``/``collate_fn`` attributes and argument validation (same exception
types and messages, done by torch's own constructor) are torch's.

What matches torch exactly, batch by batch:

* map-style datasets: the indices come from torch's own samplers (``self.batch_sampler``, i.e.
  ``BatchSampler(SequentialSampler | RandomSampler(generator=generator) | sampler)``, or the
  ``batch_sampler`` given), drawn in the same order from the same RNGs as torch (one base-seed draw
  per ``iter()``, then the sampler), so with ``seed=None`` even ``shuffle=True`` gives torch's
  permutation for the same ``generator`` or ``torch.manual_seed``;
* the batches equal ``default_collate``'s (types, values, dtypes, shapes, nesting): tensors,
  ndarrays, NumPy scalars (their dtype), Python ``int`` -> int64, ``float`` -> float64, ``bool``
  -> bool, strings and bytes -> the list torch gives (a tuple inside a tuple or list sample, as
  torch's ``zip`` makes), dicts (other mappings cloned as torch clones them), namedtuples, tuples
  -> lists (as torch), lists, and any nesting of those. Samples the buffers cannot reproduce
  (``None``, bfloat16 or ``requires_grad`` tensors, tensor subclasses, custom sequences, string
  arrays, ...) are collated by torch's ``default_collate`` itself, errors included;
* ``collate_fn`` receives what torch gives it: the list of samples, or ``__getitems__``'s return
  value as it is when the dataset has ``__getitems__``; ``batch_size=None`` gives
  ``collate_fn(dataset[i])`` per index (``default_convert`` by default), as torch;
* ``IterableDataset``: with ``num_workers=0`` the dataset is iterated, batched and collated as
  torch does (``batch_size=None``, ``drop_last``, ``len()``'s warning). With ``num_workers > 0``
  (processes) each worker iterates its own copy, sees ``torch.utils.data.get_worker_info()`` as
  torch's workers do (``id``, ``num_workers``, ``seed = base_seed + id``, its ``dataset`` copy),
  batches and collates in the worker, and batches are taken round-robin from the workers,
  skipping a worker that has ended: torch's order. ``persistent_workers`` keeps the same worker
  processes (and dataset copies) across epochs, as torch;
* worker processes are seeded as torch seeds them (``random``, ``torch`` and NumPy's global
  generators from ``base_seed + worker_id``), ``worker_init_fn(worker_id)`` runs in each with
  ``get_worker_info()`` set (map-style datasets too), and ``multiprocessing_context`` picks the
  start method;
* ``pin_memory=True`` pins the batches (torch's ``pin_memory`` walk) when an accelerator is
  available; without one it warns once, as torch does, and does nothing.

What differs:

* Default-collated batches of map-style datasets are written straight into a few reused NumPy
  buffers (shared memory with worker processes) and handed out as tensors viewing them
  (``torch.from_numpy``, no copy). A buffer is reused only once nothing references any tensor of
  its batch, so a batch you keep is never overwritten; dropping each batch when done lets the
  loader run without allocating, while keeping many makes it allocate new buffers.
* The fast path shapes its buffers from the first batch's own samples (nothing is read before
  the epoch: a dataset sees exactly torch's reads), and every sample must then match the first
  one's structure, shapes and dtypes (a mismatch, a tensor of a wider dtype included, raises
  ``TypeError`` or ``ValueError`` naming the sample). torch decides per batch from the batch's
  first sample, so datasets whose samples change type (an ``int`` here, a ``float`` there) can be
  collated by torch where slipstream raises. Malformed batches raise in both, sometimes with other
  types. Packed files (``ss.open``) are the exception: their ``F.JSON`` and ragged fields may
  change structure from batch to batch (a longer list, a dict with more keys), and each batch
  comes out as torch collates it.
* A sized ``sampler``/``batch_sampler`` is drawn whole for each epoch (at ``iter()`` with workers,
  at the first ``next()`` without, when torch starts drawing it); one without ``__len__``
  (endless ones included) is read as the batches are loaded, as torch reads it. Indices must be
  integers in ``range(len(dataset))`` (passed to the dataset as Python ints).
* Worker processes: with ``persistent_workers=False`` each epoch gets new worker processes that
  see the dataset as it is then and are seeded from that epoch's base seed, as torch's; with
  ``persistent_workers=True`` they keep the dataset copy and seeds of the first epoch, as torch's.
  Random augmentations drawn from the global RNGs match torch's with ``num_workers=0`` only (with
  workers, which worker loads which sample differs from torch). ``ss.sample_rng()`` gives
  per-sample randomness that is the same with any number of workers. Thread workers read the live
  dataset; the slipstream loader re-reads ``len(dataset)`` every epoch (a dataset may grow).
* ``backend="thread"``: ``get_worker_info()`` stays None in worker threads (torch's is one
  process-wide value), so an ``IterableDataset`` with ``num_workers > 0`` needs processes and
  raises ``ValueError`` here; ``worker_init_fn`` runs once per thread per epoch; samples that
  draw from the global RNGs draw from the main process's (torch's workers draw from their own).
* ``prefetch_factor`` is per worker, as torch's: ``num_workers * prefetch_factor`` batches are
  loaded ahead (slipstream's workers share each batch rather than take one each).
* Errors are torch's: a ``timeout`` raises ``DataLoaderTimeoutError``, a ``RuntimeError`` whose
  message starts with torch's ``DataLoader timed out after N seconds`` (and a ``TimeoutError``,
  with slipstream's detail after it); a dead worker raises ``ss.WorkerError`` (a
  ``RuntimeError``) starting with torch's ``DataLoader worker (pid(s) N) exited unexpectedly``
  (and ``... is killed by signal: ...`` for a signal). An exception raised while loading a batch
  comes from that ``next()`` and the epoch goes on with the next batch, as torch's does, each
  batch read once (except with an ``IterableDataset`` in worker processes or ``device="cuda"``,
  where it ends the epoch).
* Batches of an ``IterableDataset`` come back from worker processes pickled (a copy), not
  through torch's shared-memory tensors.
* ``pin_memory_device`` is accepted and ignored (deprecated in torch); ``timeout`` is accepted
  with ``num_workers=0`` (torch fails at ``iter()``). An ``IterDataPipe`` is seeded from the
  loader's generator at each ``iter()`` and sharded between worker processes as torch does it
  (the same shuffles as torch).

``close()`` (or ``with DataLoader(...) as loader:``) stops the worker processes at once; they are
also stopped when the loader is garbage collected or the interpreter exits.

Checkpoints (torchdata's ``StatefulDataLoader`` methods, which Lightning saves and restores):
``loader.state_dict()`` at any point (before an epoch, mid-epoch, after leaving the loop, after an
epoch) returns a JSON-serializable dict (it survives ``torch.save``/``torch.load`` too); a new
``DataLoader`` built with the same arguments that gets it through ``load_state_dict(state)``
yields exactly the rest of that epoch, then the following epochs. The state holds the epoch and
the batches handed out, the states the epoch's generators had before its draws (torch's global
one, ``generator``, a sampler's own ``.generator``; the resumed epoch draws again from them, so
its base seed and sampler indices are the interrupted epoch's), the loader's private generators
now, persistent workers' base seed, and slipstream's loader's state (map-style: the batches
handed out are skipped unread). An ``IterableDataset``'s epoch is read again from its start and
the batches handed out are dropped: exact for a dataset that yields the same stream again, at the
cost of reading them. torch's global generator is the user's: the resumed draws leave it as it was
(or advanced as in the interrupted run, if it is at the state they were drawn from), and the
epochs after the resumed one draw from it as torch's do; ``seed=`` or ``generator=`` make every
epoch reproducible. A sampler that keeps an epoch (``DistributedSampler``: ``epoch`` and
``set_epoch``, which torch leaves to the user) is put back at the epoch the interrupted one drew
at by ``load_state_dict``, so the rest comes from the same permutation without a ``set_epoch``
call; one moved to another epoch before the resumed epoch draws raises ``ValueError``. Loading
into a loader built with another dataset size, batching or sampling raises ``ValueError``.
"""

from ..core.optional import require

require(
    "torch",
    extra="torch",
    purpose="slipstream.torch needs PyTorch",
    note="see https://pytorch.org/get-started/locally/ for the build that matches your accelerator",
)

from ..core.errors import DataLoaderTimeoutError  # (after the check that torch is there)
from ._accelerate import AccelerateBypassWarning, prepare
from ._dataloader import DataLoader

# the public classes are ``slipstream.torch``'s, wherever they are defined
DataLoader.__module__ = __name__
DataLoaderTimeoutError.__module__ = __name__
AccelerateBypassWarning.__module__ = __name__

__all__ = ["AccelerateBypassWarning", "DataLoader", "DataLoaderTimeoutError", "prepare"]

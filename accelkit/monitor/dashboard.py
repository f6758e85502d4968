"""The Grafana dashboard accelkit ships (`accelkit monitor --dashboard > accelkit.json`): rows for
devices (DCGM names), the host, jobs tracked with ``track()`` and serving (vLLM names). It is built
here from the same metric names the collectors export, and a test checks every expression against a
live scrape."""

from __future__ import annotations

from typing import Any

# (row title, [(panel title, unit, [PromQL expressions])])
ROWS: list[tuple[str, list[tuple[str, str, list[str]]]]] = [
    ("Devices", [
        ("GPU utilization", "percent", ["DCGM_FI_DEV_GPU_UTIL"]),
        # DCGM's FB figures are MiB: Grafana's "mbytes" (mebibytes); "decmbytes" (10^6 B) showed an H100's 81,559 MiB
        # as 81.6 GB, neither its 85.5 GB nor the 79.6 GiB nvidia-smi's MiB make (found in review)
        ("GPU memory used", "mbytes", ["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE",
                                       "DCGM_FI_DEV_FB_RESERVED"]),
        ("Power", "watt", ["DCGM_FI_DEV_POWER_USAGE"]),
        ("Energy rate (from the counter)", "watt", ["rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[1m]) / 1000"]),
        ("Temperature", "celsius", ["DCGM_FI_DEV_GPU_TEMP"]),
        ("SM clock", "rotmhz", ["DCGM_FI_DEV_SM_CLOCK"]),
        ("Throttle reasons (bitmask)", "none", ["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"]),
    ]),
    ("Host", [
        ("CPU utilization per core", "percent", ["accelkit_host_cpu_utilization_percent"]),
        ("Memory", "bytes", ["accelkit_host_memory_used_bytes", "accelkit_host_memory_total_bytes"]),
        ("Network", "Bps", ["rate(accelkit_host_network_bytes_total[1m])"]),
        ("Disk", "Bps", ["rate(accelkit_host_disk_bytes_total[1m])"]),
    ]),
    ("Jobs", [
        ("Step time p50 / p90", "s", [
            "histogram_quantile(0.5, sum by (job_name, le) (rate(accelkit_job_step_seconds_bucket[5m])))",
            "histogram_quantile(0.9, sum by (job_name, le) (rate(accelkit_job_step_seconds_bucket[5m])))",
        ]),
        ("Tokens / s", "short", ["accelkit_job_tokens_per_second"]),
        ("Samples / s", "short", ["accelkit_job_samples_per_second"]),
        ("MFU", "percentunit", ["accelkit_job_mfu"]),
        ("Steps / s", "short", ["rate(accelkit_job_steps_total[1m])"]),
        ("Device memory", "bytes", ["accelkit_job_device_memory_bytes"]),
        ("Host memory (RSS)", "bytes", ["accelkit_job_host_memory_bytes"]),
        ("Logged scalars (loss …)", "none", ["accelkit_job_scalar"]),
    ]),
    ("Serving", [
        ("Requests running / waiting", "short", ["vllm:num_requests_running", "vllm:num_requests_waiting"]),
        ("KV-cache usage", "percentunit", ["vllm:kv_cache_usage_perc"]),
        ("Generation tokens / s", "short", ["rate(vllm:generation_tokens_total[1m])"]),
        ("Prompt tokens / s", "short", ["rate(vllm:prompt_tokens_total[1m])"]),
        ("TTFT p50 / p99", "s", [
            "histogram_quantile(0.5, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))",
            "histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))",
        ]),
        ("Inter-token latency p50 / p99", "s", [
            "histogram_quantile(0.5, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket[5m])))",
            "histogram_quantile(0.99, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket[5m])))",
        ]),
        ("E2E latency p50", "s", ["histogram_quantile(0.5, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))"]),
        ("Finished requests / s", "reqps", ["sum by (finished_reason) (rate(vllm:request_success_total[1m]))"]),
        ("Preemptions / s", "short", ["rate(vllm:num_preemptions_total[1m])"]),
        ("Prefix-cache hit rate", "percentunit", [
            "rate(vllm:prefix_cache_hits_total[5m]) / rate(vllm:prefix_cache_queries_total[5m])",
        ]),
        ("Engine step p50 / p99", "s", [
            "histogram_quantile(0.5, sum by (le) (rate(accelkit_engine_step_seconds_bucket[5m])))",
            "histogram_quantile(0.99, sum by (le) (rate(accelkit_engine_step_seconds_bucket[5m])))",
        ]),
        ("Engine thread ran / waited for a core / for masks (share of step time)", "percentunit", [
            "rate(accelkit_engine_step_cpu_seconds_total[1m]) / rate(accelkit_engine_step_seconds_sum[1m])",
            "rate(accelkit_engine_thread_runqueue_seconds_total[1m]) / rate(accelkit_engine_step_seconds_sum[1m])",
            "rate(accelkit_structured_mask_wait_seconds_total[1m]) / rate(accelkit_engine_step_seconds_sum[1m])",
        ]),
    ]),
]


def dashboard() -> dict[str, Any]:
    """The dashboard as Grafana JSON (schema 39), with a Prometheus data-source variable."""
    panels: list[dict[str, Any]] = []
    y, pid = 0, 1
    for row_title, row_panels in ROWS:
        panels.append({"type": "row", "title": row_title, "id": pid, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        pid, y = pid + 1, y + 1
        for i, (title, unit, exprs) in enumerate(row_panels):
            panels.append({
                "type": "timeseries", "title": title, "id": pid,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "gridPos": {"h": 8, "w": 8, "x": (i % 3) * 8, "y": y + (i // 3) * 8},
                "targets": [{"expr": e, "refId": chr(ord("A") + j), "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                            for j, e in enumerate(exprs)],
            })
            pid += 1
        y += 8 * ((len(row_panels) + 2) // 3)
    return {
        "title": "accelkit",
        "uid": "accelkit-overview",
        "tags": ["accelkit", "dcgm", "vllm"],
        "schemaVersion": 39,
        "time": {"from": "now-30m", "to": "now"},
        "refresh": "10s",
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}]},
        "panels": panels,
    }


def expressions(board: dict[str, Any]) -> list[str]:
    """Every PromQL expression in a dashboard."""
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]

"""What a run leaves for people to read: metric series and plots drawn from `metrics.jsonl` (`series`, `plotting`,
`summary_plot`), the rollout-samples page (`samples_html`) and the metric sinks (`tracking`: TensorBoard, W&B)."""

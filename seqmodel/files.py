"""The files a trained retriever's directory holds, named once (the run layout refers to them)."""

MODEL_FILE = "retriever.json"  # config, token space and the inputs fingerprint of the run
SUMMARY_FILE = "train_summary.json"  # written last: the run finished
METRICS_FILE = "metrics.jsonl"  # one row per logged step and per validation
CHECKPOINTS_DIR = "checkpoints"

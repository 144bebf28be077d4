"""Training side of mmemb: objectives, student model, data, evaluation and the Ray Train loop."""

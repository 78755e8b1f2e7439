"""The files of a model: the weights-only archive format, model and replay-buffer files, and
checkpoints to resume from."""

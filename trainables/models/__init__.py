"""The networks: the student (an encoder and its method's heads), the heads, pretrained encoders by
name, the frozen text teachers, a student's MLflow export. May import: runtime, evaluation, objectives."""

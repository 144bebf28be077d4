"""The networks: the student (an encoder and its method's heads), the heads, the frozen text
teachers, a student's MLflow export. May import: runtime, evaluation, objectives."""

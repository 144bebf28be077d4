"""Scoring a frozen encoder as the papers do, without SentEval: the STS tasks (``sts``) and the
transfer tasks (``transfer``, over the batched probe of ``probe``). May import: runtime."""

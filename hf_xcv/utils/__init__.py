"""What every other part of hf_xcv builds on and that imports nothing of it: the validators of settings
(:mod:`.checks`), the one way a seed becomes a random generator (:mod:`.generators`) and the pure operations on
bounding boxes (:mod:`.box_ops`)."""

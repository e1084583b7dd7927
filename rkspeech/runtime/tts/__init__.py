"""What runs text to speech on the host: the talker and code-predictor graph backends."""

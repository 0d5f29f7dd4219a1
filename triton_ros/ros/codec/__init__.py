"""What goes into a model and what comes out of it: reading a received message into a model
input (an input kind: :mod:`.image`), and turning a frame's model outputs into the message
published (an output format: :mod:`.detection`, :mod:`.classification`, :mod:`.tensors`), the
two interfaces in :mod:`.base` and every kind and format by name in :mod:`.registry`."""

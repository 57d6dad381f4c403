"""Finding the energy- and EDP-optimal power cap or SM clock cap in few runs."""

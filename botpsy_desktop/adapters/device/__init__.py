"""The computer itself: sound, do not disturb, appearance, brightness, power, apps and the lock."""

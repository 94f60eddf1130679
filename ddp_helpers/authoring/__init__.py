"""For authors: lessons built from solutions, a lesson exported as a script, its pace."""

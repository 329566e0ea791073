"""The 8B preset rehearsed at toy size: local stand-ins of its Hub inputs and the overlay check."""

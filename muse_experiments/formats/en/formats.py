"""Date formats for English: ISO-like, 24-hour, and always the time zone ("T": UTC, CET...).

Dates are shown in ``settings.REPORTING_TIME_ZONE`` (Django's current time zone); naming the zone
next to every date-time keeps a PM in Berlin and an analyst in New York reading the same instant.
"""

DATETIME_FORMAT = "Y-m-d H:i T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i T"

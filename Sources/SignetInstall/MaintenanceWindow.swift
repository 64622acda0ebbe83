#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore

/// When a device may swap in a new release (config `window`): days of the week, as
/// systemd's calendar events name them (`Mon..Fri`, `Sat,Sun`; all days when left out), and a
/// span of local time `HH:MM..HH:MM`, its end excluded; a span whose end is not after its start
/// runs past midnight, and belongs to the day it starts on (`Fri 22:00..02:00` is Friday night).
///
/// Outside every window an update downloads and stages the release, verified, but does not
/// swap it in; the next run inside a window installs what was staged.
public struct MaintenanceWindow: Sendable, Equatable, CustomStringConvertible {
    /// Days it opens on, 0 = Sunday … 6 = Saturday.
    public let days: Set<Int>
    /// Minutes after local midnight: the span's start, and its end (excluded).
    public let start: Int
    public let end: Int
    public let description: String

    private static let dayNames = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]

    /// Parses `Mon..Fri 02:00..04:00`, `Sat,Sun 00:00..24:00` or `22:00..02:00`. Throws
    /// `.usage` naming the problem.
    public init(_ text: String) throws {
        let usage =
            "a window is [DAYS] HH:MM..HH:MM in local time, such as \"Mon..Fri 02:00..04:00\" or \"Sat,Sun 22:00..06:00\" (DAYS: Mon to Sun, joined by , or ..)"
        let words = text.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        guard (1...2).contains(words.count) else { throw SignetError(.usage, "'\(text)': \(usage)") }
        var days = Set(0..<7)
        if words.count == 2 {
            days = []
            for part in words[0].lowercased().split(separator: ",", omittingEmptySubsequences: false) {
                let range = part.components(separatedBy: "..")
                guard (1...2).contains(range.count), let first = Self.day(range[0]), let last = Self.day(range.last!) else {
                    throw SignetError(.usage, "'\(text)': '\(part)' is not a day or a range of days; \(usage)")
                }
                var day = first
                while true {
                    days.insert(day)
                    if day == last { break }
                    day = (day + 1) % 7
                }
            }
        }
        let span = words.last!.components(separatedBy: "..")
        guard span.count == 2, let start = Self.minutes(span[0]), let end = Self.minutes(span[1]), start < 24 * 60, start != end else {
            throw SignetError(.usage, "'\(text)': \(usage)")
        }
        self.days = days
        self.start = start
        self.end = end
        description = text
    }

    private static func day(_ text: String) -> Int? {
        let name = text.prefix(3).lowercased()
        guard text.count >= 3, let index = dayNames.firstIndex(of: name),
            ["sun", "mon", "tue", "wed", "thu", "fri", "sat", "sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"].contains(
                text.lowercased())
        else { return nil }
        return index
    }

    /// `HH:MM` (24:00 allowed as an end) in minutes.
    private static func minutes(_ text: String) -> Int? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, parts.allSatisfy({ $0.count == 2 && $0.allSatisfy { $0.isASCII && $0.isNumber } }),
            let hours = Int(parts[0]), let minutes = Int(parts[1]), minutes < 60, hours < 24 || (hours == 24 && minutes == 0)
        else { return nil }
        return hours * 60 + minutes
    }

    /// Whether `time` (local time, as the C library's time zone says) falls in the window.
    public func contains(_ time: Timestamp) -> Bool {
        var seconds = time_t(time.secondsSinceEpoch)
        var local = tm()
        guard localtime_r(&seconds, &local) != nil else { return false }
        let minute = Int(local.tm_hour) * 60 + Int(local.tm_min)
        let day = Int(local.tm_wday)
        if start < end { return days.contains(day) && minute >= start && minute < end }
        // Past midnight: the evening part on its own day, the morning part the day after.
        return (days.contains(day) && minute >= start) || (days.contains((day + 6) % 7) && minute < end)
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A process's start time (`/proc/PID/stat`, field 22: clock ticks after boot) and process
/// group: how a later run tells a process group an earlier Signet started (a hook it was killed
/// in) from an unrelated one that reuses the number.
package enum ProcessStart {
    /// The start time of process `pid`, nil when there is none.
    package static func ticks(of pid: Int32) -> UInt64? {
        fields(of: pid).flatMap { $0.count > 19 ? UInt64($0[19]) : nil }
    }

    /// Ends (SIGKILL) process group `group` when it is the one started at `ticks`: its leader
    /// alive with that start time, or — the leader gone — members started no earlier. Returns
    /// whether it signalled the group.
    @discardableResult
    package static func endGroup(_ group: Int32, startedAt ticks: UInt64) -> Bool {
        guard group > 1 else { return false }
        if let leader = self.ticks(of: group) {
            guard leader == ticks else { return false }
            return kill(-group, SIGKILL) == 0
        }
        guard let folder = opendir("/proc") else { return false }
        defer { closedir(folder) }
        while let entry = readdir(folder) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard let pid = Int32(name), let stat = fields(of: pid), stat.count > 19,
                Int32(stat[2]) == group, let started = UInt64(stat[19]), started >= ticks
            else { continue }
            return kill(-group, SIGKILL) == 0
        }
        return false
    }

    /// The fields of `/proc/PID/stat` after the command name (state first: field 3 is index 0).
    private static func fields(of pid: Int32) -> [Substring]? {
        guard pid > 0, let bytes = try? readSmallFile("/proc/\(pid)/stat", what: "process status", limit: 4_096) else { return nil }
        let text = String(decoding: bytes, as: UTF8.self)
        // The command name is in parentheses and may hold spaces or ')': the fields follow the last ')'.
        guard let close = text.lastIndex(of: ")") else { return nil }
        return text[text.index(after: close)...].split(separator: " ")
    }
}

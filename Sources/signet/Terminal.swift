import Signet
#if canImport(Glibc)
import Glibc
#endif

/// Reading secrets from the user's terminal without echo.
enum Terminal {
    /// True when stdin is a terminal, so a person can be asked.
    static var isInteractive: Bool { isatty(STDIN_FILENO) == 1 }

    /// Prints `prompt` on stderr and reads one line from stdin with echo off.
    static func readSecret(prompt: String) throws -> Passphrase {
        Output.standardError(prompt)
                var saved = termios()
        let haveTerminal = tcgetattr(STDIN_FILENO, &saved) == 0
        if haveTerminal {
            var silent = saved
            silent.c_lflag &= ~tcflag_t(ECHO)
            silent.c_lflag |= tcflag_t(ECHONL)
            tcsetattr(STDIN_FILENO, TCSAFLUSH, &silent)
        }
        defer {
            if haveTerminal { tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved) }
        }
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let n = read(STDIN_FILENO, &byte, 1)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 || byte == UInt8(ascii: "\n") { break }
            bytes.append(byte)
        }
        if bytes.last == UInt8(ascii: "\r") { bytes.removeLast() }
        defer { for index in bytes.indices { bytes[index] = 0 } }
        return Passphrase(bytes: bytes)
    }
}

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
        // Echo goes off before the prompt appears, and without TCSAFLUSH: flushing would throw
        // away a passphrase that was typed or pasted (or sent by a script) as the prompt showed.
        var saved = termios()
        let haveTerminal = tcgetattr(STDIN_FILENO, &saved) == 0
        if haveTerminal {
            var silent = saved
            silent.c_lflag &= ~tcflag_t(ECHO)
            silent.c_lflag |= tcflag_t(ECHONL)
            restoreOnSignal(saved)
            tcsetattr(STDIN_FILENO, TCSANOW, &silent)
        }
        defer {
            if haveTerminal {
                tcsetattr(STDIN_FILENO, TCSADRAIN, &saved)
                restoreOnSignal(nil)
            }
        }
        Output.standardError(Output.escaped(prompt))
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

    /// The terminal settings to put back if the user interrupts the prompt (Ctrl-C, SIGTERM, SIGHUP),
    /// so their shell is not left without echo. Plain heap memory, set up before any handler is
    /// installed: a signal handler must not touch Swift globals that may still need initialising.
    nonisolated(unsafe) private static let interruptedSettings: UnsafeMutablePointer<termios> = {
        let storage = UnsafeMutablePointer<termios>.allocate(capacity: 1)
        storage.initialize(to: termios())
        return storage
    }()

    /// Whether a prompt has echo switched off right now (plain memory, read by the signal thread).
    nonisolated(unsafe) private static let prompting: UnsafeMutablePointer<Int32> = {
        let flag = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
        flag.initialize(to: 0)
        return flag
    }()

    /// Called by the signal thread (``Signals``): puts the terminal back if a prompt is showing.
    static func restoreAfterInterrupt() {
        if prompting.pointee != 0 { tcsetattr(STDIN_FILENO, TCSANOW, interruptedSettings) }
    }

    private static func restoreOnSignal(_ settings: termios?) {
        let signals = [SIGINT, SIGTERM, SIGHUP, SIGQUIT]
        guard let settings else {
            prompting.pointee = 0
            for number in signals { signal(number, SIG_DFL) }
            return
        }
        interruptedSettings.pointee = settings
        prompting.pointee = 1
        for number in signals {
            signal(number) { received in
                tcsetattr(STDIN_FILENO, TCSANOW, Terminal.interruptedSettings)
                signal(received, SIG_DFL)
                raise(received)
            }
        }
    }
}
